#!/usr/bin/env python3
"""Where the suite's time goes: every ctest test run N at a time (as scripts/test.sh's ctest -jN), each under
os.wait4, so that each test's CPU time (user + sys, its reaped children included: mpirun's ranks, Python) is
recorded beside its wall time. The suite on 2 cores is CPU-bound, so the CPU column is what a change must cut.

  cd build && ctest --show-only=json-v1 > tests.json
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 python3 ../tools/suite_profile.py tests.json 3 prof.json
  python3 ../tools/suite_profile.py --report prof.json [--top 30]

Tests start in decreasing COST, as ctest orders them, with each test's ENVIRONMENT and WORKING_DIRECTORY; output is
discarded (run ctest for the logs). RUN_SERIAL is not honoured. Exit status 77 counts as a skip, not a failure.
"""
import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time


def prop(test, key, default=None):
    for p in test.get("properties", []):
        if p["name"] == key:
            return p["value"]
    return default


def run(tests_json, jobs, out, name_filter):
    tests = [t for t in json.load(open(tests_json))["tests"] if name_filter in t["name"]]
    tests.sort(key=lambda t: -float(prop(t, "COST", 0)))
    todo = queue.Queue()
    for t in tests:
        todo.put(t)
    results, lock, t00 = [], threading.Lock(), time.time()

    def worker():
        while True:
            try:
                t = todo.get_nowait()
            except queue.Empty:
                return
            env = dict(os.environ)
            for e in prop(t, "ENVIRONMENT", []) or []:
                k, v = e.split("=", 1)
                env[k] = v
            t0 = time.time()
            p = subprocess.Popen(t["command"], cwd=prop(t, "WORKING_DIRECTORY", "."), env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            with lock:
                results.append(dict(name=t["name"], wall=time.time() - t0, cpu=ru.ru_utime + ru.ru_stime,
                                    rc=os.waitstatus_to_exitcode(status), start=t0 - t00))

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    json.dump(dict(total=time.time() - t00, jobs=jobs, res=results), open(out, "w"))
    report(out, 20)


def report(path, top):
    d = json.load(open(path))
    r = sorted(d["res"], key=lambda x: -x["cpu"])
    failed = [(x["name"], x["rc"]) for x in r if x["rc"] not in (0, 77)]
    print(f"{len(r)} tests at -j{d.get('jobs', '?')}: {d['total']:.0f} s wall, {sum(x['cpu'] for x in r):.0f} CPU-s, "
          f"sum of test times {sum(x['wall'] for x in r):.0f} s; failed: {failed or 'none'}")
    for x in r[:top]:
        print(f"{x['cpu']:7.1f} CPU-s {x['wall']:7.1f} s wall  started at {x['start']:5.0f} s  {x['name']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", metavar="PROFILE", help="print a profile written before")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--filter", default="", help="only the tests whose name contains this")
    ap.add_argument("args", nargs="*", help="TESTS_JSON JOBS OUT")
    a = ap.parse_args()
    if a.report:
        report(a.report, a.top)
        return
    if len(a.args) != 3:
        ap.error("give TESTS_JSON JOBS OUT (or --report PROFILE)")
    run(a.args[0], int(a.args[1]), a.args[2], a.filter)


if __name__ == "__main__":
    sys.exit(main())
