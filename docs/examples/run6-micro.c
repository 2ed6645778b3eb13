/* Driver call costs on the GPU machine (sixth session, docs/examples/run6-final.txt):
 *   gcc -O2 -o micro run6-micro.c -I/usr/local/cuda/include -lcuda && ./micro */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 2000000
int main(void){
  CUdevice d; CUcontext c, cur; cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
  CUmemPoolProps p; memset(&p,0,sizeof p); p.allocType=CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type=CU_MEM_LOCATION_TYPE_DEVICE; p.location.id=0;
  CUmemoryPool pool; cuMemPoolCreate(&pool,&p); cuuint64_t th=~0ull; cuMemPoolSetAttribute(pool,CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,&th);
  CUstream s; cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); CUevent e; cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  for (int round=0; round<3; round++){
  double t0=now(); for(int i=0;i<N;i++) cuCtxGetCurrent(&cur); double t1=now();
  printf("cuCtxGetCurrent %.1f ns\n",(t1-t0)/N*1e9);
  CUdeviceptr x; int n=N/4;
  t0=now(); for(int i=0;i<n;i++){cuMemAllocFromPoolAsync(&x,1<<20,pool,CU_STREAM_LEGACY);cuMemFreeAsync(x,CU_STREAM_LEGACY);} t1=now();
  printf("pool pair legacy %.1f ns\n",(t1-t0)/n*1e9);
  t0=now(); for(int i=0;i<n;i++){cuMemAllocFromPoolAsync(&x,1<<20,pool,CU_STREAM_LEGACY);cuCtxGetCurrent(&cur);cuCtxGetCurrent(&cur);cuMemFreeAsync(x,CU_STREAM_LEGACY);} t1=now();
  printf("pool pair legacy + 2 cuCtxGetCurrent %.1f ns\n",(t1-t0)/n*1e9);
  t0=now(); for(int i=0;i<n;i++) cuStreamQuery(s); t1=now(); printf("cuStreamQuery idle %.1f ns\n",(t1-t0)/n*1e9);
  t0=now(); for(int i=0;i<n;i++) cuEventQuery(e); t1=now(); printf("cuEventQuery %.1f ns\n",(t1-t0)/n*1e9);
  cuCtxSynchronize();
  }
  return 0;
}
