# SPDX-License-Identifier: Apache-2.0
"""A CUDA tensor shared with a child process through torch.multiprocessing.

PyTorch sends a CUDA tensor as a legacy IPC handle (cudaIpcGetMemHandle) of
the cudaMalloc'd segment of its caching allocator that holds the storage,
plus the storage's offset in it; under cupool that segment comes from a
pool.  The child reads the tensor and a view into it, modifies both, and
the parent reads the child's writes.  Exits 0 and prints "torch ipc ok"
when every check passes; exits 1 at once when PyTorch cannot share the
tensor (with PYTORCH_NO_CUDA_MEMORY_CACHING=1 it finds no segment for the
storage, with or without cupool).
"""
import sys

import torch
import torch.multiprocessing as mp

N = 1 << 20


def child(inbox, outbox):
    whole, view = inbox.get()
    expect = torch.arange(N, dtype=torch.float32, device="cuda")
    ok_whole = torch.equal(whole, expect)
    ok_view = torch.equal(view, expect[4096:8192])
    whole.mul_(2)
    view.add_(1)  # on top of the doubling: the view shares the storage
    torch.cuda.synchronize()
    outbox.put((ok_whole, ok_view))
    del whole, view
    inbox.get()  # the parent has read: now the child may let go


def main():
    mp.set_start_method("spawn")
    whole = torch.arange(N, dtype=torch.float32, device="cuda")
    view = whole[4096:8192]
    inbox, outbox = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(inbox, outbox))
    p.start()
    try:
        # Pickled here, not in the queue's feeder thread, so that a tensor
        # PyTorch cannot share fails now.
        from multiprocessing.reduction import ForkingPickler
        ForkingPickler.dumps((whole, view))
    except RuntimeError as e:
        print(f"PyTorch cannot share the tensor: {e}")
        p.kill()
        return 1
    inbox.put((whole, view))
    ok_whole, ok_view = outbox.get(timeout=120)
    expect = torch.arange(N, dtype=torch.float32, device="cuda") * 2
    expect[4096:8192] += 1
    torch.cuda.synchronize()
    ok_back = torch.equal(whole, expect)
    inbox.put(None)
    p.join(timeout=120)
    print(f"child read the tensor: {ok_whole}, the view: {ok_view}; parent reads the child's writes: {ok_back}; "
          f"child exit {p.exitcode}")
    if ok_whole and ok_view and ok_back and p.exitcode == 0:
        print("torch ipc ok")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
