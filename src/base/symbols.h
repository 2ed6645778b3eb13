/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one list of driver entry points cupool touches.  CUPOOL_HANDLED rows are
 * the entry points cupool intercepts: each generates a typed pointer to the
 * real function (real_<name>), a row of the dlsym table (exact exported name)
 * and a row of the cuGetProcAddress table (base name, the CUDA version that
 * introduced this variant, and whether it is the per-thread-default-stream
 * variant).  The shim itself is the exported function of the same name.
 * CUPOOL_USED rows are driver functions cupool only calls; they get typed
 * real_<name> pointers and nothing else.  A name is in one list only (its
 * real_<name> would be defined twice): the real_<name> of a handled row is
 * also what cupool's own calls use, and they reach the driver without
 * passing through the shim (cupool's own copies and sets do not come back
 * to the work tracker).
 * CUPOOL_WORK_ENTRIES (work_shims.h, generated from cuda.h by
 * scripts/gen_work_shims.py) lists the entry points that give a stream
 * work; they are handled too, each with a shim of src/shims/work.c, and
 * have rows in every table CUPOOL_HANDLED's have but the enum of the call
 * log and statistics: their shims neither log nor count a call.
 *
 * Columns: exported symbol (its prototype comes from cuda.h, read with
 * __CUDA_API_VERSION_INTERNAL so every versioned name is declared), base name
 * as cuGetProcAddress sees it, version introduced,
 * stream flavour (CUPOOL_ANY: no per-thread variant exists; CUPOOL_LEGACY /
 * CUPOOL_PTDS: one of a legacy/per-thread pair).
 * Adding an entry point is one row here plus its shim.
 */
#ifndef CUPOOL_SYMBOLS_H
#define CUPOOL_SYMBOLS_H

#include "work_shims.h"

#define CUPOOL_HANDLED(X) \
    X(cuInit,                           "cuInit",                         2000,  CUPOOL_ANY)    \
    X(cuGetProcAddress,                 "cuGetProcAddress",               11030, CUPOOL_ANY)    \
    X(cuGetProcAddress_v2,              "cuGetProcAddress",               12000, CUPOOL_ANY)    \
    X(cuMemAlloc_v2,                    "cuMemAlloc",                     3020,  CUPOOL_ANY)    \
    X(cuMemAllocPitch_v2,               "cuMemAllocPitch",                3020,  CUPOOL_ANY)    \
    X(cuMemFree_v2,                     "cuMemFree",                      3020,  CUPOOL_ANY)    \
    X(cuMemGetInfo_v2,                  "cuMemGetInfo",                   3020,  CUPOOL_ANY)    \
    X(cuMemAllocHost_v2,                "cuMemAllocHost",                 3020,  CUPOOL_ANY)    \
    X(cuMemHostAlloc,                   "cuMemHostAlloc",                 2020,  CUPOOL_ANY)    \
    X(cuMemFreeHost,                    "cuMemFreeHost",                  2000,  CUPOOL_ANY)    \
    X(cuMemAllocManaged,                "cuMemAllocManaged",              6000,  CUPOOL_ANY)    \
    X(cuMemAdvise,                      "cuMemAdvise",                    8000,  CUPOOL_ANY)    \
    X(cuMemAdvise_v2,                   "cuMemAdvise",                    12020, CUPOOL_ANY)    \
    X(cuStreamAttachMemAsync,           "cuStreamAttachMemAsync",         6000,  CUPOOL_LEGACY) \
    X(cuStreamAttachMemAsync_ptsz,      "cuStreamAttachMemAsync",         7000,  CUPOOL_PTDS)   \
    X(cuMemAllocAsync,                  "cuMemAllocAsync",                11020, CUPOOL_LEGACY) \
    X(cuMemAllocAsync_ptsz,             "cuMemAllocAsync",                11020, CUPOOL_PTDS)   \
    X(cuMemAllocFromPoolAsync,          "cuMemAllocFromPoolAsync",        11020, CUPOOL_LEGACY) \
    X(cuMemAllocFromPoolAsync_ptsz,     "cuMemAllocFromPoolAsync",        11020, CUPOOL_PTDS)   \
    X(cuMemFreeAsync,                   "cuMemFreeAsync",                 11020, CUPOOL_LEGACY) \
    X(cuMemFreeAsync_ptsz,              "cuMemFreeAsync",                 11020, CUPOOL_PTDS)   \
    X(cuIpcGetMemHandle,                "cuIpcGetMemHandle",              4010,  CUPOOL_ANY)    \
    X(cuIpcOpenMemHandle,               "cuIpcOpenMemHandle",             4010,  CUPOOL_ANY)    \
    X(cuIpcOpenMemHandle_v2,            "cuIpcOpenMemHandle",             11000, CUPOOL_ANY)    \
    X(cuIpcCloseMemHandle,              "cuIpcCloseMemHandle",            4010,  CUPOOL_ANY)    \
    X(cuStreamCreate,                   "cuStreamCreate",                 2000,  CUPOOL_ANY)    \
    X(cuStreamCreateWithPriority,       "cuStreamCreateWithPriority",     5050,  CUPOOL_ANY)    \
    X(cuStreamDestroy_v2,               "cuStreamDestroy",                4000,  CUPOOL_ANY)    \
    X(cuStreamBeginCapture,             "cuStreamBeginCapture",           10000, CUPOOL_LEGACY) \
    X(cuStreamBeginCapture_ptsz,        "cuStreamBeginCapture",           10000, CUPOOL_PTDS)   \
    X(cuStreamBeginCapture_v2,          "cuStreamBeginCapture",           10010, CUPOOL_LEGACY) \
    X(cuStreamBeginCapture_v2_ptsz,     "cuStreamBeginCapture",           10010, CUPOOL_PTDS)   \
    X(cuStreamBeginCaptureToGraph,      "cuStreamBeginCaptureToGraph",    12030, CUPOOL_LEGACY) \
    X(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph",    12030, CUPOOL_PTDS)   \
    X(cuStreamEndCapture,               "cuStreamEndCapture",             10000, CUPOOL_LEGACY) \
    X(cuStreamEndCapture_ptsz,          "cuStreamEndCapture",             10000, CUPOOL_PTDS)   \
    X(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice", 9000, CUPOOL_ANY) \
    X(cuGreenCtxStreamCreate,           "cuGreenCtxStreamCreate",         12050, CUPOOL_ANY)    \
    X(cuCtxCreate_v2,                   "cuCtxCreate",                    3020,  CUPOOL_ANY)    \
    X(cuCtxCreate_v3,                   "cuCtxCreate",                    11040, CUPOOL_ANY)    \
    X(cuCtxCreate_v4,                   "cuCtxCreate",                    12050, CUPOOL_ANY)    \
    X(cuCtxDestroy_v2,                  "cuCtxDestroy",                   4000,  CUPOOL_ANY)    \
    X(cuDevicePrimaryCtxRetain,         "cuDevicePrimaryCtxRetain",       7000,  CUPOOL_ANY)    \
    X(cuDevicePrimaryCtxRelease_v2,     "cuDevicePrimaryCtxRelease",      11000, CUPOOL_ANY)    \
    X(cuDevicePrimaryCtxReset_v2,       "cuDevicePrimaryCtxReset",        11000, CUPOOL_ANY)    \
    X(cuCtxEnablePeerAccess,            "cuCtxEnablePeerAccess",          4000,  CUPOOL_ANY)    \
    X(cuCtxDisablePeerAccess,           "cuCtxDisablePeerAccess",         4000,  CUPOOL_ANY)    \
    X(cuGraphAddMemsetNode,             "cuGraphAddMemsetNode",           10000, CUPOOL_ANY)    \
    X(cuGraphAddNode,                   "cuGraphAddNode",                 12020, CUPOOL_ANY)    \
    X(cuGraphAddNode_v2,                "cuGraphAddNode",                 12030, CUPOOL_ANY)    \
    X(cuGraphMemsetNodeGetParams,       "cuGraphMemsetNodeGetParams",     10000, CUPOOL_ANY)    \
    X(cuGraphMemsetNodeSetParams,       "cuGraphMemsetNodeSetParams",     10000, CUPOOL_ANY)    \
    X(cuGraphExecMemsetNodeSetParams,   "cuGraphExecMemsetNodeSetParams", 10020, CUPOOL_ANY)    \
    X(cuGraphNodeSetParams,             "cuGraphNodeSetParams",           12020, CUPOOL_ANY)    \
    X(cuGraphExecNodeSetParams,         "cuGraphExecNodeSetParams",       12020, CUPOOL_ANY)    \
    X(cuGraphNodeGetType,               "cuGraphNodeGetType",             10000, CUPOOL_ANY)    \
    X(cuGraphClone,                     "cuGraphClone",                   10000, CUPOOL_ANY)    \
    X(cuGraphDestroyNode,               "cuGraphDestroyNode",             10000, CUPOOL_ANY)    \
    X(cuGraphDestroy,                   "cuGraphDestroy",                 10000, CUPOOL_ANY)

#define CUPOOL_USED(X) \
    X(cuDriverGetVersion)          \
    X(cuGetErrorName)              \
    X(cuDeviceGetCount)            \
    X(cuDeviceGetAttribute)        \
    X(cuDeviceGetDefaultMemPool)   \
    X(cuDeviceGetUuid_v2)          \
    X(cuDevicePrimaryCtxGetState)  \
    X(cuCtxGetCurrent)             \
    X(cuCtxGetDevice)              \
    X(cuCtxGetApiVersion)          \
    X(cuCtxGetId)                  \
    X(cuCtxPushCurrent_v2)         \
    X(cuCtxPopCurrent_v2)          \
    X(cuCtxSynchronize)            \
    X(cuCtxRecordEvent)            \
    X(cuStreamSynchronize)         \
    X(cuStreamQuery)               \
    X(cuStreamWaitEvent)           \
    X(cuStreamGetFlags)            \
    X(cuStreamGetCtx)              \
    X(cuStreamIsCapturing)         \
    X(cuStreamIsCapturing_ptsz)    \
    X(cuThreadExchangeStreamCaptureMode) \
    X(cuEventCreate)               \
    X(cuEventRecord)               \
    X(cuEventQuery)                \
    X(cuEventSynchronize)          \
    X(cuEventDestroy_v2)           \
    X(cuMemPoolCreate)             \
    X(cuMemPoolDestroy)            \
    X(cuMemPoolSetAttribute)       \
    X(cuMemPoolGetAttribute)       \
    X(cuMemPoolTrimTo)             \
    X(cuMemPoolSetAccess)          \
    X(cuMemPoolExportToShareableHandle) \
    X(cuMemPoolImportFromShareableHandle) \
    X(cuMemPoolExportPointer)      \
    X(cuMemPoolImportPointer)      \
    X(cuPointerGetAttribute)       \
    X(cuModuleLoadData)            \
    X(cuModuleGetFunction)         \
    X(cuModuleUnload)              \
    X(cuGraphCreate)               \
    X(cuGraphAddKernelNode_v2)     \
    X(cuGraphAddEmptyNode)         \
    X(cuGraphKernelNodeGetParams_v2) \
    X(cuGraphKernelNodeSetParams_v2) \
    X(cuGraphExecKernelNodeSetParams_v2) \
    X(cuGraphNodeGetDependencies_v2) \
    X(cuGraphGetNodes)             \
    X(cuGraphNodeFindInClone)

#endif
