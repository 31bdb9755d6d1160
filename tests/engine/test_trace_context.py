"""trace.py: the switches belong to the thread (and the asyncio task) that sets them. Two threads, and two tasks,
interleaved on purpose with events and awaits, each get exactly their own gradients, FLOP counts, scopes and graph;
the oracles are the same work done alone and the FLOP rules' closed forms."""
from __future__ import annotations

import asyncio
import threading

import numpy as np

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.counting import count_flops
from tinygrad_block.graph import record_graph

N = 16


def gradient_work() -> tuple[bool, np.ndarray]:
    """y = sum(w * x): requires grad, and dy/dw = x."""
    x = tb.tensor(np.arange(N, dtype=np.float32))
    w = tb.ones(N, requires_grad=True)
    y = (w * x).sum()
    requires = y.requires_grad
    y.backward()
    return requires, w.grad.numpy()


def matmuls(k: int) -> tb.Tensor:
    """k matmuls of (8, 8) @ (8, 8): 2 * 8^3 = 1,024 FLOPs each, nothing else."""
    a = tb.ones(8, 8)
    for _ in range(k):
        a = a @ tb.ones(8, 8)
    return a


def test_no_grad_in_one_thread_leaves_another_recording():
    entered, done, seen = threading.Event(), threading.Event(), {}

    def quiet():
        with tb.no_grad():
            entered.set()
            done.wait(timeout=10)             # the other thread computes while this one sits in no_grad
            seen["inside"] = tb.trace.STATE.get().grad_enabled
            seen["quiet"] = (tb.ones(3, requires_grad=True) * 2).requires_grad

    def busy():
        entered.wait(timeout=10)
        seen["busy"] = gradient_work()
        done.set()

    threads = [threading.Thread(target=quiet), threading.Thread(target=busy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    requires, grad = seen["busy"]
    assert requires and np.array_equal(grad, np.arange(N, dtype=np.float32))
    assert seen["inside"] is False and seen["quiet"] is False
    assert tb.trace.STATE.get().grad_enabled is True


def test_each_thread_counts_and_records_only_its_own_ops():
    counts, graphs = {}, {}
    barrier = threading.Barrier(2, timeout=10)

    def worker(name: str, k: int):
        with count_flops() as fc, record_graph() as graph:
            for _ in range(k):
                barrier.wait()                # both threads are inside their counters, running ops in turns
                matmuls(1)
        counts[name], graphs[name] = fc.total("forward", matmul_only=True), graph

    threads = [threading.Thread(target=worker, args=(n, 5)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for name in ("a", "b"):
        assert counts[name] == 5 * 2 * 8 ** 3                    # its own 5 matmuls, none of the other's
        assert [graphs[name].nodes[i].label for i in graphs[name].ops("forward")] == ["matmul"] * 5


def test_module_scopes_do_not_cross_threads():
    block = nn.TransformerBlock(nn.preset("tiny"), generator=tb.Generator(0))
    x = tb.randn(1, 4, 64, generator=tb.Generator(1))
    scopes, barrier = {}, threading.Barrier(2, timeout=10)

    def in_block():
        with count_flops() as fc:
            barrier.wait()
            block(x)
        scopes["block"] = fc

    def outside():
        with count_flops() as fc:
            barrier.wait()
            matmuls(3)
        scopes["outside"] = fc

    threads = [threading.Thread(target=in_block), threading.Thread(target=outside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    with count_flops() as alone:
        block(x)
    assert scopes["block"].flops == alone.flops and scopes["block"].calls == alone.calls    # scope by scope
    assert scopes["outside"].by_scope("forward") == {"": 3 * 2 * 8 ** 3}                   # no module's name


def test_two_asyncio_tasks_keep_their_own_switches():
    async def quiet():
        with tb.no_grad():
            for _ in range(5):
                await asyncio.sleep(0)         # the other task runs here
            return tb.trace.STATE.get().grad_enabled, (tb.ones(2, requires_grad=True) * 3).requires_grad

    async def busy():
        await asyncio.sleep(0)                 # starts once quiet is inside no_grad
        return gradient_work()

    async def counting(k: int):
        with count_flops() as fc:
            for _ in range(k):
                matmuls(1)
                await asyncio.sleep(0)
        return fc.total("forward", matmul_only=True)

    async def main():
        return await asyncio.gather(quiet(), busy(), counting(3), counting(7))

    (inside, quiet_requires), (requires, grad), three, seven = asyncio.run(main())
    assert inside is False and quiet_requires is False
    assert requires and np.array_equal(grad, np.arange(N, dtype=np.float32))
    assert (three, seven) == (3 * 1024, 7 * 1024)
