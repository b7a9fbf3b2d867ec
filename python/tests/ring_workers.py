"""Worker processes of test_ring.py (torch.multiprocessing.spawn imports this module in each child): one rank of a
gloo group runs fa.ring_attention on its zigzag shard of the inputs saved by the parent, backpropagates its shard of
dout, and saves its output and gradients for the parent to put back together."""

import os

import torch
import torch.distributed as dist


def run_rank(rank: int, world: int, work: str, case: dict) -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("gloo", init_method=f"file://{work}/rendezvous", rank=rank, world_size=world)
    try:
        from fa.ring import ring_attention, zigzag_shard

        data = torch.load(f"{work}/inputs.pt")
        device = torch.device(case["device"])
        if device.type == "cuda":
            torch.cuda.set_device(device)
        shards = {name: zigzag_shard(data[name], rank, world).to(device) for name in ("q", "k", "v", "dout")}
        q, k, v = (shards[n].clone().requires_grad_() for n in ("q", "k", "v"))
        o, lse = ring_attention(q, k, v, causal=case["causal"], return_lse=True, reference=case.get("reference"))
        o.backward(shards["dout"])
        torch.save(
            {"o": o.detach().cpu(), "lse": lse.cpu(), "dq": q.grad.cpu(), "dk": k.grad.cpu(), "dv": v.grad.cpu()},
            f"{work}/rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()
