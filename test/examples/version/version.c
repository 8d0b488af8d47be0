#include <dsrt/dsrt.h>
#include <stdio.h>

int main(void) {
  printf("dsrt %s plan format %u\n", dsrt_version(), dsrt_plan_format_version());
  return 0;
}
