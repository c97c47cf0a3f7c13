# The seconds each longer integration test took in a full suite (ctest's own record of the last runs,
# Testing/Temporary/CTestCostData.txt, on a 2-vCPU Xeon, 2026-12-03; a new test's: its time alone). ctest -j starts tests in decreasing COST;
# a fresh build has no record, and without these it starts them in name order, so the longest integration tests
# began last and ran on after the short ones had finished. Not a limit: a test may take longer or shorter.
set(GF_IT_COST
    megatron_jobs=165 families=123 context_parallel=63 plan_bytes=62 zero=58 kill_resume=56 pipeline_equivalence=53
    proof_faults=53 two_servers=51 lambada=50 journeys=48 layout_equivalence=46 predict=44 preprocess_sentencepiece=44
    megatron_resume=42 megatron_resume_core=41 moe_equivalence=40 sft=34 torchrun_launch=32 eval_harness=30 doc_commands=28
    megatron_core_forward=23 checkpoint_crash=27 lora=25 openblas_kernels=25 megatron_out=24 serve=24 msrun_launch=23 mfu_peak=22
    run_distribute=18 run_distribute_launch=18 stop_checkpoint=18 context_parallel_rows=17 slurm=17 hang_timeout=16
    bad_input=13 checkpoint_resume=13 lora_peft=13 machine_probe=13 omp_wait=13 collectives_mpi=12 layout_errors=12
    plot_metrics=12 plan_cli=11 pipeline_schedule_file=10
)
foreach(pair ${GF_IT_COST})
  string(REPLACE "=" ";" kv ${pair})
  list(GET kv 0 name)
  list(GET kv 1 seconds)
  if(TEST integration.${name})
    set_tests_properties(integration.${name} PROPERTIES COST ${seconds})
  endif()
endforeach()
