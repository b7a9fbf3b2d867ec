/* consumer.c -- links fa::fa from an installed tree and calls the C API (no GPU needed). */
#include <fa/fa.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  fa_params p;
  if (fa_params_init(&p) != FA_OK) return 1;
  if (strcmp(fa_status_string(FA_ERROR_INVALID_ARGUMENT), "FA_ERROR_INVALID_ARGUMENT") != 0) return 2;
  printf("fa %s from an installed package: ok\n", fa_version_string());
  return 0;
}
