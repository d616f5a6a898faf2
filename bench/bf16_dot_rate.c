// The issue rate of vdpbf16ps against vfmadd231ps (zmm) on this CPU: 16
// independent accumulator chains of each, back to back. A bfloat16 pair dot
// product does 32 multiply-adds per instruction, an FMA 16, so bfloat16
// kernels gain over float32 only where vdpbf16ps issues at more than half
// the FMA rate. On the 2-vCPU Xeon of 2026-12-07 (family 6 model 167, AVX-512
// BF16 + AMX, under load) it issued at a quarter: 0.49-0.55x the float32
// multiply-adds per second, which is why kiln.compile(precision="bfloat16")
// ran 0.78x of float32 there (bench/precision_bench.py); AMX-BF16 (tdpbf16ps)
// is that machine's bfloat16 path.
//   gcc -O2 -o /tmp/bf16_dot_rate bench/bf16_dot_rate.c && /tmp/bf16_dot_rate
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define ITER 20000000L
#define ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
__attribute__((target("avx512f,avx512bf16"),noinline)) double bf(float* out){
  volatile float s0=0; __m512 a0=_mm512_set1_ps(s0),a1=_mm512_set1_ps(s0+1),a2=_mm512_set1_ps(s0+2),a3=_mm512_set1_ps(s0+3),a4=_mm512_set1_ps(s0+4),a5=_mm512_set1_ps(s0+5),a6=_mm512_set1_ps(s0+6),a7=_mm512_set1_ps(s0+7),a8=_mm512_set1_ps(s0+8),a9=_mm512_set1_ps(s0+9),a10=_mm512_set1_ps(s0+10),a11=_mm512_set1_ps(s0+11),a12=_mm512_set1_ps(s0+12),a13=_mm512_set1_ps(s0+13),a14=_mm512_set1_ps(s0+14),a15=_mm512_set1_ps(s0+15);
  __m512bh x=(__m512bh)_mm512_set1_epi32(0x3f803f80), y=(__m512bh)_mm512_set1_epi32(0x3c003c00);
  double t=now();
  for(long k=0;k<ITER;k++){
#define S(i) a##i=_mm512_dpbf16_ps(a##i,x,y);
    ACC(S)
    __asm__ volatile("" : "+v"(x));
  }
  t=now()-t;
#define R(i) out[i]=_mm512_reduce_add_ps(a##i);
  ACC(R) return t;}
__attribute__((target("avx512f,fma"),noinline)) double fm(float* out){
  volatile float s0=0; __m512 a0=_mm512_set1_ps(s0),a1=_mm512_set1_ps(s0+1),a2=_mm512_set1_ps(s0+2),a3=_mm512_set1_ps(s0+3),a4=_mm512_set1_ps(s0+4),a5=_mm512_set1_ps(s0+5),a6=_mm512_set1_ps(s0+6),a7=_mm512_set1_ps(s0+7),a8=_mm512_set1_ps(s0+8),a9=_mm512_set1_ps(s0+9),a10=_mm512_set1_ps(s0+10),a11=_mm512_set1_ps(s0+11),a12=_mm512_set1_ps(s0+12),a13=_mm512_set1_ps(s0+13),a14=_mm512_set1_ps(s0+14),a15=_mm512_set1_ps(s0+15);
  __m512 x=_mm512_set1_ps(1.0f), y=_mm512_set1_ps(1e-30f);
  double t=now();
  for(long k=0;k<ITER;k++){
#define F(i) a##i=_mm512_fmadd_ps(x,y,a##i);
    ACC(F)
    __asm__ volatile("" : "+v"(x));
  }
  t=now()-t;
  ACC(R) return t;}
int main(){ float o[16]; for(int r=0;r<5;r++){ double b=bf(o), f=fm(o); printf("16 chains: vdpbf16ps %.3f s  vfmadd231ps %.3f s  -> per-instruction time bf16/fma %.2f, MACs/s bf16/f32 %.2f\n", b, f, b/f, 2*f/b); } }
