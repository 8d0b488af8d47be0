// Register-only f32 FMA throughput: 12 independent vfmadd231ps ymm chains, for RESULTS.md
// 2026-12-05 Zen 3.   gcc -O2 -mavx2 -mfma f32-fma.c -o f32-fma && ./f32-fma
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  const long N=100000000; __m256 b=_mm256_set1_ps(1.0f),c=_mm256_set1_ps(0.0f);
  __m256 a0=b,a1=b,a2=b,a3=b,a4=b,a5=b,a6=b,a7=b,a8=b,a9=b,a10=b,a11=b;
  double t=now();
  for(long i=0;i<N;i++){
    a0=_mm256_fmadd_ps(a0,b,c);a1=_mm256_fmadd_ps(a1,b,c);a2=_mm256_fmadd_ps(a2,b,c);a3=_mm256_fmadd_ps(a3,b,c);
    a4=_mm256_fmadd_ps(a4,b,c);a5=_mm256_fmadd_ps(a5,b,c);a6=_mm256_fmadd_ps(a6,b,c);a7=_mm256_fmadd_ps(a7,b,c);
    a8=_mm256_fmadd_ps(a8,b,c);a9=_mm256_fmadd_ps(a9,b,c);a10=_mm256_fmadd_ps(a10,b,c);a11=_mm256_fmadd_ps(a11,b,c);
  }
  double f=now()-t; __m256 s=_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0,a1),_mm256_add_ps(a2,a3)),_mm256_add_ps(_mm256_add_ps(a4,a5),_mm256_add_ps(a6,a7)));
  s=_mm256_add_ps(s,_mm256_add_ps(_mm256_add_ps(a8,a9),_mm256_add_ps(a10,a11)));
  float o[8]; _mm256_storeu_ps(o,s);
  printf("fma x12: %.2f G instr/s -> %.1f G f32 MAC/s (%g)\n", N*12/f/1e9, N*12*8/f/1e9, o[0]);
}
