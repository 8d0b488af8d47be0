// Register-only throughput of int8 products on AVX2 (vpmaddubsw + vpmaddwd + vpaddd, 32
// products a group), for RESULTS.md 2026-12-05 Zen 3. The f32 loop here has 8 chains and is
// latency-bound: f32-fma.c (12 chains) gives the FMA rate.
// gcc -O2 -mavx2 -mfma int8-products.c -o int8-products && ./int8-products   (one idle core)
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  const long N=200000000;
  __m256 a[8],b=_mm256_set1_ps(1.0f),c=_mm256_set1_ps(0.0f);
  for(int i=0;i<8;i++)a[i]=_mm256_set1_ps(i);
  double t=now();
  for(long i=0;i<N;i++){
    #pragma GCC unroll 8
    for(int k=0;k<8;k++) a[k]=_mm256_fmadd_ps(a[k],b,c);
    __asm__ volatile("" : "+x"(a[0]),"+x"(a[1]),"+x"(a[2]),"+x"(a[3]),"+x"(a[4]),"+x"(a[5]),"+x"(a[6]),"+x"(a[7]));
  }
  double f=now()-t; float s=0; for(int i=0;i<8;i++){float o[8];_mm256_storeu_ps(o,a[i]);s+=o[0];}
  printf("fma: %.2f G instr/s -> %.1f G f32 MAC/s (%g)\n", N*8/f/1e9, N*8*8/f/1e9, s);
  __m256i x[8], w=_mm256_set1_epi8(3), ones=_mm256_set1_epi16(1), acc[8];
  for(int i=0;i<8;i++){x[i]=_mm256_set1_epi8(i+1);acc[i]=_mm256_setzero_si256();}
  t=now();
  for(long i=0;i<N;i++){
    #pragma GCC unroll 8
    for(int k=0;k<8;k++){ __m256i p=_mm256_maddubs_epi16(x[k],w); acc[k]=_mm256_add_epi32(acc[k],_mm256_madd_epi16(p,ones)); }
    __asm__ volatile("" : "+x"(acc[0]),"+x"(acc[1]),"+x"(acc[2]),"+x"(acc[3]),"+x"(acc[4]),"+x"(acc[5]),"+x"(acc[6]),"+x"(acc[7]));
  }
  f=now()-t; int si=0; for(int i=0;i<8;i++)si+=_mm256_extract_epi32(acc[i],0);
  printf("maddubs+madd+add: %.2f G groups/s -> %.1f G int8 MAC/s (%d)\n", N*8/f/1e9, N*8*32/f/1e9, si);
  return 0;
}
