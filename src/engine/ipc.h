/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Legacy CUDA IPC on the blocks of exportable pools (ipc.c, ipc_export.c,
 * CUPOOL_IPC), as the shims see it.
 */
#ifndef CUPOOL_ENGINE_IPC_H
#define CUPOOL_ENGINE_IPC_H

#include "origin.h"

/* cupool_ipc_export fills a handle for block o (CUDA_ERROR_INVALID_VALUE
 * when its pool cannot be exported).  cupool_ipc_is_ours says whether a
 * handle is one cupool made; cupool_ipc_open maps such a handle's block
 * from the exporting process (*size, *device: the block's size and the
 * opener's device, for the log); cupool_ipc_close closes what it opened (0
 * when ptr is not such a mapping: the driver's then).  The program frees an
 * exported block: cupool_ipc_owner_frees returns 1 when another process
 * still has it open, and cupool holds it until they close it (it must not
 * go back to its pool now).  cupool_ipc_stop removes the socket at exit. */
CUresult cupool_ipc_export(CUipcMemHandle *handle, const cupool_origin_t *o);
int cupool_ipc_is_ours(const CUipcMemHandle *handle);
CUresult cupool_ipc_open(CUdeviceptr *dptr, const CUipcMemHandle *handle, unsigned int flags, size_t *size, int *device);
int cupool_ipc_close(CUdeviceptr ptr, CUresult *result);
int cupool_ipc_owner_frees(const cupool_origin_t *o);
void cupool_ipc_stop(void);

#endif
