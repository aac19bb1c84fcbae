// prelude.c - the fixed C that starts every rendered NKI program: element
// loads and stores per dtype (fp32 internal arithmetic, round-to-nearest-even
// casts, fp32->int rounds to even and saturates), the ALU and activation
// functions, and poisoning of new memory (NaN for floats, 4 for integers).
// exp, tanh and erf come from trn/scalar.h (libtrn's float kernels, ~1 ulp,
// no libm call), so activation loops vectorize like the eager kernels.
// It is part of the rendered source, hence of the disk cache key.
#include "nki_impl.h"

const char *const nki__prelude[] = {
    "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n#include \"trn/scalar.h\"\n",
    "typedef int64_t i64;\n",
    // a failed indirect access: (flat element, tensor size), read by program.c
    "long long nki_oob[2];\n",
    // the run-time services program.c hands every instance (nki_impl.h: nki_rt)
    "typedef int (*nki_body_fn)(void*ctx,i64 it,char*scratch);\n",
    "typedef struct nki_rt{int (*pfor)(const struct nki_rt*rt,i64 n,nki_body_fn body,void*ctx,"
    "const i64*live,int nlive,char*scratch);"
    "void (*matmul)(i64 m,i64 n,i64 k,const float*a,i64 ars,i64 acs,const float*b,i64 brs,"
    "i64 bcs,float*c,i64 crs,float beta);const void*prog;int serial;}nki_rt;\n",
    // what a parallel loop's body function sees of its instance (render.c)
    "typedef struct{void*const*args;const i64*pid;const nki_rt*rt;i64 v[8];}nki_cx;\n",
    "static inline float u2f(uint32_t u){float f;memcpy(&f,&u,4);return f;}\n",
    "static inline uint32_t f2u(float f){uint32_t u;memcpy(&u,&f,4);return u;}\n",
    "static inline float mf_dec(unsigned v,int eb,int mb,int bias,int fn){int s=(v>>(eb+mb))&1;"
    "int e=(v>>mb)&((1<<eb)-1);int m=v&((1<<mb)-1);float r;"
    "if(fn){if(e==(1<<eb)-1&&m==(1<<mb)-1)return NAN;}else if(e==(1<<eb)-1)return "
    "m?NAN:(s?-INFINITY:INFINITY);"
    "if(e==0)r=ldexpf((float)m,1-bias-mb);else "
    "r=ldexpf(1.0f+(float)m/(float)(1<<mb),e-bias);return s?-r:r;}\n",
    "static inline unsigned mf_enc(float f,int eb,int mb,int bias,int fn){unsigned "
    "s=signbit(f)?1u<<(eb+mb):0u;"
    "unsigned nan=fn?((1u<<(eb+mb))-1u):((((1u<<eb)-1u)<<mb)|(1u<<(mb-1)));if(f!=f)return s|nan;"
    "float a=fabsf(f);float "
    "maxv=fn?ldexpf(2.0f-ldexpf(1.0f,1-mb),(1<<eb)-1-bias):ldexpf(2.0f-ldexpf(1.0f,-mb),(1<<eb)-2-"
    "bias);"
    "unsigned inf=fn?nan:(((1u<<eb)-1u)<<mb);if(a==0.0f)return s;int "
    "e=ilogbf(a);if(e<1-bias)e=1-bias;"
    "float q=ldexpf(1.0f,e-mb);float r=nearbyintf(a/q)*q;if(r>maxv)return s|inf;if(r==0.0f)return "
    "s;"
    "e=ilogbf(r);if(e<1-bias)return s|(unsigned)(r/ldexpf(1.0f,1-bias-mb));"
    "return s|((unsigned)(e+bias)<<mb)|((unsigned)(r/ldexpf(1.0f,e-mb))-(1u<<mb));}\n",
    // libtrn's select-based conversion (NaN stays quiet NaN), so store loops vectorize
    "static inline uint16_t f2bf(float f){return trn_float_to_bf16(f);}\n",
    "static inline float sat_i(float f,float lo,float hi){if(f!=f)return "
    "0.0f;f=nearbyintf(f);return f<lo?lo:f>hi?hi:f;}\n",
    // loads: element i of buffer b as float
    "static inline float ld0(const char*b,i64 i){return ((const float*)b)[i];}\n",
    "static inline float ld1(const char*b,i64 i){return u2f((uint32_t)((const "
    "uint16_t*)b)[i]<<16);}\n",
    "static inline float ld2(const char*b,i64 i){return (float)((const _Float16*)b)[i];}\n",
    "static inline float ld3(const char*b,i64 i){return mf_dec(((const uint8_t*)b)[i],4,3,7,0);}\n",
    "static inline float ld4(const char*b,i64 i){return mf_dec(((const uint8_t*)b)[i],4,3,7,1);}\n",
    "static inline float ld5(const char*b,i64 i){return mf_dec(((const "
    "uint8_t*)b)[i],5,2,15,0);}\n",
    "static inline float ld6(const char*b,i64 i){return (float)((const int8_t*)b)[i];}\n",
    "static inline float ld7(const char*b,i64 i){return (float)((const uint8_t*)b)[i];}\n",
    "static inline float ld8(const char*b,i64 i){return (float)((const int16_t*)b)[i];}\n",
    "static inline float ld9(const char*b,i64 i){return (float)((const uint16_t*)b)[i];}\n",
    "static inline float ld10(const char*b,i64 i){return (float)((const int32_t*)b)[i];}\n",
    "static inline float ld11(const char*b,i64 i){return (float)((const uint32_t*)b)[i];}\n",
    "static inline float ld12(const char*b,i64 i){return ((const uint8_t*)b)[i]?1.0f:0.0f;}\n",
    "static inline float ld13(const char*b,i64 i){return ((const float*)b)[i];}\n",
    // stores: float v rounded to the element's dtype
    "static inline void st0(char*b,i64 i,float v){((float*)b)[i]=v;}\n",
    "static inline void st1(char*b,i64 i,float v){((uint16_t*)b)[i]=f2bf(v);}\n",
    "static inline void st2(char*b,i64 i,float v){((_Float16*)b)[i]=(_Float16)v;}\n",
    "static inline void st3(char*b,i64 i,float v){((uint8_t*)b)[i]=(uint8_t)mf_enc(v,4,3,7,0);}\n",
    "static inline void st4(char*b,i64 i,float v){((uint8_t*)b)[i]=(uint8_t)mf_enc(v,4,3,7,1);}\n",
    "static inline void st5(char*b,i64 i,float v){((uint8_t*)b)[i]=(uint8_t)mf_enc(v,5,2,15,0);}\n",
    "static inline void st6(char*b,i64 i,float "
    "v){((int8_t*)b)[i]=(int8_t)sat_i(v,-128.0f,127.0f);}\n",
    "static inline void st7(char*b,i64 i,float "
    "v){((uint8_t*)b)[i]=(uint8_t)sat_i(v,0.0f,255.0f);}\n",
    "static inline void st8(char*b,i64 i,float "
    "v){((int16_t*)b)[i]=(int16_t)sat_i(v,-32768.0f,32767.0f);}\n",
    "static inline void st9(char*b,i64 i,float "
    "v){((uint16_t*)b)[i]=(uint16_t)sat_i(v,0.0f,65535.0f);}\n",
    "static inline void st10(char*b,i64 i,float v){float r=sat_i(v,-2147483648.0f,2147483648.0f);"
    "((int32_t*)b)[i]=r>=2147483648.0f?INT32_MAX:(int32_t)r;}\n",
    "static inline void st11(char*b,i64 i,float v){float r=sat_i(v,0.0f,4294967296.0f);"
    "((uint32_t*)b)[i]=r>=4294967296.0f?UINT32_MAX:(uint32_t)r;}\n",
    "static inline void st12(char*b,i64 i,float v){((uint8_t*)b)[i]=v!=0.0f;}\n",
    "static inline void st13(char*b,i64 i,float v){((float*)b)[i]=v;}\n",
    // exact integer stores (iota, memset of integers)
    "static inline void sti(char*b,i64 i,int sz,i64 v){if(sz==1)((int8_t*)b)[i]=(int8_t)v;"
    "else if(sz==2)((int16_t*)b)[i]=(int16_t)v;else ((int32_t*)b)[i]=(int32_t)v;}\n",
    "static inline void cpy(char*d,i64 i,const char*s,i64 j,int "
    "sz){memcpy(d+i*sz,s+j*sz,(size_t)sz);}\n",
    // NaN-propagating max/min as selects (| not ||: no branch, so they vectorize)
    "static inline float fmx(float a,float b){return ((a!=a)|(a>b))?a:b;}\n",
    "static inline float fmn(float a,float b){return ((a!=a)|(a<b))?a:b;}\n",
    "static inline float alu(int op,float a,float b){switch(op){"
    "case 0:return a;case 1:return a+b;case 2:return a-b;case 3:return a*b;case 4:return a/b;"
    "case 5:return fmx(a,b);case 6:return fmn(a,b);case 7:return powf(a,b);case 8:return a==b;case "
    "9:return a!=b;"
    "case 10:return a<b;case 11:return a<=b;case 12:return a>b;case 13:return a>=b;"
    "case 14:return a!=0.0f&&b!=0.0f;case 15:return a!=0.0f||b!=0.0f;case 16:return "
    "(a!=0.0f)!=(b!=0.0f);"
    "case 17:return (float)((int32_t)a&(int32_t)b);case 18:return (float)((int32_t)a|(int32_t)b);"
    "case 19:return (float)((int32_t)a^(int32_t)b);case 20:return "
    "(float)(int32_t)((uint32_t)(int32_t)a<<((int32_t)b&31));"
    "case 21:return (float)((int32_t)a>>((int32_t)b&31));case 22:return fmx(fabsf(a),fabsf(b));"
    "case 23:return fmn(fabsf(a),fabsf(b));case 24:{float r=fmodf(a,b);return "
    "(r!=0.0f&&((r<0.0f)!=(b<0.0f)))?r+b:r;}"
    "case 25:return fmodf(a,b);case 26:return b-a;default:return a;}}\n",
    "static inline float sigm(float x){return 1.0f/(1.0f+trn_sc_expf(-x));}\n",
    "static inline float act(int f,float x,float al){switch(f){"
    "case 0:return x;case 1:return trn_sc_expf(x);case 2:return logf(x);case 3:return "
    "sqrtf(x);case "
    "4:return 1.0f/sqrtf(x);"
    "case 5:return 1.0f/x;case 6:return trn_sc_tanhf(x);case 7:return sigm(x);case 8:return "
    "x>0.0f?x:0.0f;"
    "case 9:return 0.5f*x*(1.0f+trn_sc_erff(x*0.70710678118654752f));"
    "case 10:return 0.5f*x*(1.0f+trn_sc_tanhf(0.7978845608028654f*(x+0.044715f*x*x*x)));"
    "case 11:return x*sigm(1.702f*x);case 12:return x*sigm(x);case 13:return "
    "log1pf(expf(-fabsf(x)))+fmx(x,0.0f);"
    "case 14:return x*tanhf(log1pf(expf(-fabsf(x)))+fmx(x,0.0f));case 15:return "
    "trn_sc_erff(x);case "
    "16:return sinf(x);"
    "case 17:return cosf(x);case 18:return tanf(x);case 19:return atanf(x);case 20:return fabsf(x);"
    "case 21:return (float)((x>0.0f)-(x<0.0f));case 22:return x*x;case 23:return -x;case 24:return "
    "ceilf(x);"
    "case 25:return floorf(x);case 26:return truncf(x);"
    "case 27:{float c=0.5f*(1.0f+erff(x*0.70710678118654752f));return "
    "c+x*0.3989422804014327f*expf(-0.5f*x*x);}"
    "case 28:{float s=sigm(x);return s*(1.0f+x*(1.0f-s));}case 29:return "
    "1.1283791670955126f*expf(-x*x);"
    "case 30:return x>0.0f?x:al*x;case 31:return x>0.0f?x:al*(expf(x)-1.0f);case 32:return "
    "nearbyintf(x);"
    "case 33:{float s=sigm(1.702f*x);return s+1.702f*x*s*(1.0f-s);}case 34:return x==0.0f;"
    "case 35:return (float)(~(int32_t)x);case 36:return x*x*x;default:return x;}}\n",
    // typed fills: loops that vectorize (the pattern is per element)
    "static inline void poison(char*b,i64 n,int sz,uint32_t pat){if(sz==4){uint32_t*q=(uint32_t*)b;"
    "for(i64 i=0;i<n;i++)q[i]=pat;}else if(sz==2){uint16_t*q=(uint16_t*)b;for(i64 i=0;i<n;i++)"
    "q[i]=(uint16_t)pat;}else memset(b,(int)(pat&0xff),(size_t)n);}\n",
    NULL};
