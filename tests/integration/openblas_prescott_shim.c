/* A stand-in for OpenBLAS's answer on a CPU newer than the library (tests/integration/openblas_kernels.sh):
 * loaded with LD_PRELOAD, openblas_get_corename() answers "Prescott", the SSE3 family Debian's OpenBLAS
 * 0.3.21 takes on such a CPU, while OPENBLAS_CORETYPE is unset; once it is set, the real library's
 * answer (the family OpenBLAS actually runs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

char* openblas_get_corename(void) {
  static char prescott[] = "Prescott";
  if (getenv("OPENBLAS_CORETYPE") == NULL) return prescott;
  char* (*real)(void) = (char* (*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
  return real != NULL ? real() : NULL;
}
