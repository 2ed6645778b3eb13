"""Two PyTorch processes on one GPU under cupool (cupool(7), SHARING A GPU).

Process A allocates three quarters of the card's free memory as one tensor,
keeps a small tensor with known values, frees the large one (with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 the free reaches cupool, whose pool keeps
the memory reserved) and waits.  Process B then allocates more than is free
while A holds that reserve, and less than is free once A has handed it
back.  Run as

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=.libs/libcupool.so python3 tests/gpu/torch_share.py

(with CUPOOL_SHARE=0 in the environment B must fail: the control).  Prints
B's result and how long its allocation took, then "torch share ok" when B
succeeded and A's tensor is intact; exits 0 then, 1 otherwise.
"""
import os
import subprocess
import sys
import time

import torch


def holder():
    free, _ = torch.cuda.mem_get_info()
    keep = torch.arange(1 << 22, dtype=torch.float32, device="cuda")
    big_bytes = (free - (64 << 20)) // 4 * 3 // (2 << 20) * (2 << 20)
    big = torch.empty(big_bytes, dtype=torch.uint8, device="cuda")
    big.fill_(7)
    del big
    torch.cuda.synchronize()
    want = (free - (64 << 20) - big_bytes // 4) // (2 << 20) * (2 << 20)
    print(f"ready {want} {big_bytes}", flush=True)
    sys.stdin.readline()
    intact = torch.equal(keep, torch.arange(1 << 22, dtype=torch.float32, device="cuda"))
    again = torch.ones(1 << 20, device="cuda")
    print(f"holder intact {intact} again {float(again.sum())}", flush=True)
    return 0 if intact else 1


def needer(want):
    torch.cuda.init()
    torch.cuda.synchronize()
    start = time.monotonic()
    try:
        t = torch.empty(want, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ok = True
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        # Without the caching allocator PyTorch reports the driver's out of
        # memory as a plain CUDA error (torch.AcceleratorError).
        if "out of memory" not in str(e):
            raise
        ok = False
    took = (time.monotonic() - start) * 1000
    print(f"needer {'succeeded' if ok else 'failed'} {want} bytes in {took:.1f} ms", flush=True)
    if ok:
        t.fill_(3)
        ok = int(t[-1]) == 3
    return 0 if ok else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--holder":
        return holder()
    if len(sys.argv) > 2 and sys.argv[1] == "--needer":
        return needer(int(sys.argv[2]))
    a = subprocess.Popen([sys.executable, __file__, "--holder"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    line = a.stdout.readline().split()
    if len(line) != 3 or line[0] != "ready":
        print(f"the holder did not get ready: {line}")
        a.kill()
        return 1
    want, big = int(line[1]), int(line[2])
    print(f"holder freed {big} bytes; needer asks for {want}", flush=True)
    b = subprocess.run([sys.executable, __file__, "--needer", str(want)], timeout=300)
    out, _ = a.communicate("go\n", timeout=120)
    print(out.strip())
    ok = b.returncode == 0 and a.returncode == 0 and "intact True" in out
    print(f"torch share {'ok' if ok else 'FAILED'} (needer exit {b.returncode}, holder exit {a.returncode}; "
          f"CUPOOL_SHARE={os.environ.get('CUPOOL_SHARE', '1')})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
