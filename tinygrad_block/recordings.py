"""A preset's block (or whole model) run once for a command or a page: recorded as a graph (shape-only unless
values are asked for), the memory such a recording holds, or compiled by tb.jit into its program of kernels."""
from __future__ import annotations

from .compiled import program_of, recapture
from .dtypes import int64
from .generator import Generator
from .graph import Graph, is_movement, record_graph
from .nn import LM, BlockConfig, TransformerBlock
from .tensor import ones_like, randn, zeros


def record(cfg: BlockConfig, *, whole_model: bool, B: int, L: int, backward: bool, values: bool,
           device: str = "cpu") -> Graph:
    """Run one block (or the whole model) forward (and backward) under record_graph; shape-only unless values
    are asked for, then on `device`, every intermediate keeping its gradient."""
    device = device if values else "meta"
    g = Generator(0)
    module = LM(cfg, generator=g, device=device) if whole_model else TransformerBlock(cfg, generator=g, device=device)
    x = zeros(B, L, dtype=int64, device=device) if whole_model else \
        randn(B, L, cfg.d_model, generator=g, device=device, requires_grad=True)
    with record_graph(module, x, retain_grads=values) as graph:
        out = module(x)
        if backward:
            out.backward(ones_like(out))
    return graph


def record_bytes(cfg: BlockConfig, *, whole_model: bool, B: int, L: int, backward: bool) -> int:
    """Memory that `record(..., values=True)` holds at its end, measured by recording on meta: the graph keeps
    every tensor it saw (parameters, inputs, each op's output and, after backward, each gradient) alive; views
    share their input's memory (Movement.aliases: permute, expand, slice; a reshape is counted, as it copies a
    transposed input)."""
    graph = record(cfg, whole_model=whole_model, B=B, L=L, backward=backward, values=False)
    return sum(n.tensor.nbytes for n in graph.nodes if n.kind != "op" or not is_movement(n.label, aliasing=True))


def _on_cpu(cfg: BlockConfig, whole_model: bool, B: int, L: int) -> tuple:
    """One block (or the whole model) and its input, on the CPU with real values."""
    g = Generator(0)
    module = LM(cfg, generator=g) if whole_model else TransformerBlock(cfg, generator=g)
    x = zeros(B, L, dtype=int64) if whole_model else randn(B, L, cfg.d_model, generator=g, requires_grad=True)
    return module, x


def compiled_program(cfg: BlockConfig, *, whole_model: bool, B: int, L: int, backward: bool):
    """The program tb.jit makes of one block's (or the whole model's) forward, or forward and backward, run on
    the CPU with real values at these sizes (compiled.Program: print it, or draw it with .to_dot())."""
    module, x = _on_cpu(cfg, whole_model, B, L)
    return program_of(module, x, backward=backward)


def compiled_recording(cfg: BlockConfig, *, whole_model: bool, B: int, L: int, values: bool) -> tuple:
    """(graph, program): the program of one block's (or the whole model's) forward and backward, as
    compiled_program, and the graph of one more run of the same call, captured again (compiled.recapture), so
    that each op node names the instruction that runs it (the explorer's compiled pane)."""
    module, x = _on_cpu(cfg, whole_model, B, L)
    program = program_of(module, x, backward=True)
    with record_graph(module, x, retain_grads=values) as graph:
        recapture(program, module, x, backward=True)
    return graph, program
