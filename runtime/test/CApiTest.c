/* The C API compiles as C and answers without a plan. */
#include "dsrt/dsrt.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;
#define EXPECT(cond)                                                                        \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                   \
      ++failures;                                                                           \
    }                                                                                       \
  } while (0)

int main(void) {
  EXPECT(strlen(dsrt_version()) >= 5);
  EXPECT(dsrt_plan_format_version() >= 1);
  EXPECT(strcmp(dsrt_status_name(DSRT_CORRUPT_PLAN), "DSRT_CORRUPT_PLAN") == 0);
  EXPECT(strcmp(dsrt_status_name((dsrt_status)99), "DSRT_UNKNOWN_STATUS") == 0);
  EXPECT(strcmp(dsrt_last_error(), "") == 0);
  printf("%d passed, %d failed\n", 5 - failures, failures);
  return failures != 0;
}
