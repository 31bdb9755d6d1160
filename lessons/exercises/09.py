"""Lesson 09's exercises: the post-norm layout from a block's modules, the gradient reaching the input of a stack
of blocks (pre-norm against post-norm, 3 blocks), and the residual stream split into one write per sublayer.
Each check compares with an independent oracle (nn.PostNormBlock and the hand-derived forward and backward passes
of tinygrad_block.manual, in numpy) and says what is wrong, with the numbers, naming the usual slips."""
from __future__ import annotations

import numpy as np

import tinygrad_block as tb
from tinygrad_block import manual, nn

from .common import CheckFailed, tensor_result

CFG = nn.BlockConfig(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=32)   # GQA, d_head = 4
B, L = 2, 5


def _blocks(layout: str, n: int, seed: int) -> list:
    """n blocks of `layout` in float64 with every parameter random: weights ~ N(0, 1/fan_in), and norm gains
    ~ 1 + 0.3 N(0, 1), so that norm1 and norm2 differ and swapping them shows."""
    r, out = np.random.default_rng(seed), []
    for i in range(n):
        blk = nn.TransformerBlock(CFG.with_(layout=layout), generator=tb.Generator(seed + i), dtype=tb.float64)
        blk.load_state_dict({name: tb.tensor(1 + 0.3 * r.standard_normal(p.shape) if p.ndim == 1 else
                                             r.standard_normal(p.shape) / np.sqrt(p.shape[-1]), dtype=tb.float64)
                             for name, p in blk.named_parameters()})
        out.append(blk)
    return out


def _params(block) -> dict:
    return {name: p.numpy() for name, p in block.named_parameters()}


def _input(seed: int) -> np.ndarray:
    return 2.0 * np.random.default_rng(seed).standard_normal((B, L, CFG.d_model))     # RMS about 2


# ---------------------------------------------------------------- post_norm_block
def _post_slips(block, xn: np.ndarray) -> list:
    """(output, hint) of the usual mistakes, computed with the block's modules."""
    x = tb.tensor(xn, dtype=tb.float64)
    n1, n2, attn, ffn = block.norm1, block.norm2, block.attn, block.ffn
    h = x + attn(n1(x))
    pre = h + ffn(n2(h))
    h = x + n1(attn(x))
    inside = h + n2(ffn(h))
    h = n2(x + attn(x))
    swapped = n1(h + ffn(h))
    h = n1(x + attn(x))
    one_add = n2(ffn(h))
    return [(pre, "that is the pre-norm layout, x + attn(norm1(x)): in post-norm the sublayer reads x itself and "
                  "the norm comes AFTER the residual add, h = norm1(x + attn(x))"),
            (inside, "the norm went on the sublayer's output before the add, x + norm1(attn(x)); post-norm "
                     "normalises the sum: norm1(x + attn(x))"),
            (swapped, "norm1 and norm2 are swapped: norm1 follows attention, norm2 follows the FFN"),
            (one_add, "the second residual is missing: out = norm2(h + ffn(h)), not norm2(ffn(h))")]


def check_post_norm_block(solution) -> None:
    """Against nn.PostNormBlock holding the same weights and against manual.block_forward (post-norm, numpy);
    then the gradient of x against the hand-derived post-norm backward."""
    pre_block = _blocks("pre", 1, seed=10)[0]
    post_block = nn.TransformerBlock(CFG.with_(layout="post"), generator=tb.Generator(0), dtype=tb.float64)
    post_block.load_state_dict(pre_block.state_dict())
    xn = _input(11)
    got = tensor_result(solution.post_norm_block(pre_block, tb.tensor(xn, dtype=tb.float64)), "post_norm_block",
                    xn.shape)
    want, _ = manual.block_forward(xn, _params(pre_block), CFG.with_(layout="post"))
    if not np.abs(got - want).max() < 1e-12:
        for wrong, hint in _post_slips(pre_block, xn):
            if np.abs(got - wrong.numpy()).max() < 1e-12:
                raise CheckFailed(f"post_norm_block is off by up to {np.abs(got - want).max():.3g}: {hint}")
        library = post_block(tb.tensor(xn, dtype=tb.float64)).numpy()
        raise CheckFailed(f"post_norm_block is off by up to {np.abs(got - library).max():.3g} from nn.PostNormBlock "
                          "with the same weights (norm2(h + ffn(h)), h = norm1(x + attn(x)))")
    x = tb.tensor(xn, dtype=tb.float64, requires_grad=True)
    out = solution.post_norm_block(pre_block, x)
    if not out.requires_grad:
        raise CheckFailed("no gradient reaches x: use the block's modules on Tensors, not numpy arrays")
    dout = np.random.default_rng(12).standard_normal(xn.shape)
    out.backward(tb.tensor(dout, dtype=tb.float64))
    _, cache = manual.block_forward(xn, _params(pre_block), CFG.with_(layout="post"))
    dx, _ = manual.block_backward(dout, cache)
    if x.grad is None or np.abs(x.grad.numpy() - dx).max() > 1e-10:
        raise CheckFailed("the gradient of x through post_norm_block differs from the hand-derived backward")


# ---------------------------------------------------------------- input_grad_ratio
def _grad_by_hand(blocks, xn: np.ndarray, dout: np.ndarray, layout: str) -> np.ndarray:
    """dL/dx through the stack, with the hand-derived forward and backward passes."""
    caches, h = [], xn
    for blk in blocks:
        h, cache = manual.block_forward(h, _params(blk), CFG.with_(layout=layout))
        caches.append(cache)
    g = dout
    for cache in reversed(caches):
        g, _ = manual.block_backward(g, cache)
    return g


def _ratio_by_hand(blocks, xn: np.ndarray, dout: np.ndarray, layout: str) -> float:
    """|dL/dx| / |dout| through the stack, the Frobenius norms."""
    return float(np.linalg.norm(_grad_by_hand(blocks, xn, dout, layout)) / np.linalg.norm(dout))


def check_input_grad_ratio(solution) -> None:
    """Three pre-norm blocks and three post-norm blocks, against the hand-derived backward passes."""
    for layout, seed in (("pre", 20), ("post", 30)):
        blocks, xn = _blocks(layout, 3, seed), _input(seed + 5)
        dout = np.random.default_rng(seed + 6).standard_normal(xn.shape)
        want = _ratio_by_hand(blocks, xn, dout, layout)
        got = solution.input_grad_ratio(blocks, tb.tensor(xn, dtype=tb.float64), tb.tensor(dout, dtype=tb.float64))
        if isinstance(got, tb.Tensor) and got.size == 1:
            got = got.item()
        if not isinstance(got, (float, int, np.floating)) or isinstance(got, bool):
            raise CheckFailed(f"input_grad_ratio must return a float; got {type(got).__name__}")
        if abs(got - want) < 1e-9 * want:
            continue
        grad_norm, dx = want * np.linalg.norm(dout), _grad_by_hand(blocks, xn, dout, layout)
        other_norm = ("that is a ratio of another norm (largest entry, or sum of |entries|); use the Frobenius "
                      "norm, the square root of the sum of squares: np.linalg.norm of the whole array")
        ones = _ratio_by_hand(blocks, xn, np.ones_like(dout), layout)
        hints = [(grad_norm, "that is |dL/dx| itself: divide by |dout|"),
                 (1 / want, "that is |dout| / |dL/dx|, upside down"),
                 (ones, "that backpropagates a gradient of ones (out.sum().backward()): use out.backward(dout)"),
                 (ones * np.sqrt(xn.size) / np.linalg.norm(dout),
                  "that backpropagates a gradient of ones (out.sum().backward()): use out.backward(dout)"),
                 (np.abs(dx).max() / np.abs(dout).max(), other_norm),
                 (np.abs(dx).sum() / np.abs(dout).sum(), other_norm)]
        hint = next((h for value, h in hints if abs(got - value) < 1e-9 * abs(value)), "")
        raise CheckFailed(f"input_grad_ratio for 3 {layout}-norm blocks = {float(got):.6f}, but the hand-derived "
                          f"backward gives {want:.6f}" + (f": {hint}" if hint else ""))


# ---------------------------------------------------------------- sublayer_writes
def check_sublayer_writes(solution) -> None:
    """Two pre-norm blocks: each write against the sublayer applied to the running stream, and x plus their sum
    against the stack's output."""
    blocks, xn = _blocks("pre", 2, seed=40), _input(41)
    x = tb.tensor(xn, dtype=tb.float64)
    got = solution.sublayer_writes(blocks, x)
    if not isinstance(got, (list, tuple)) or len(got) != 4:
        raise CheckFailed(f"sublayer_writes for 2 blocks must return a list of 4 Tensors (attention and FFN of each "
                          f"block); got {type(got).__name__}"
                          + (f" of {len(got)}" if isinstance(got, (list, tuple)) else ""))
    got = [tensor_result(t, "each write", xn.shape) for t in got]
    stream, want, partial, from_input, block_input = x, [], [], [], []
    for blk in blocks:
        block_input.append(stream)
        want.append(blk.attn(blk.norm1(stream)).numpy())
        from_input.append(blk.attn(blk.norm1(x)).numpy())
        stream = stream + blk.attn(blk.norm1(stream))
        partial.append(stream.numpy())
        want.append(blk.ffn(blk.norm2(stream)).numpy())
        from_input.append(blk.ffn(blk.norm2(x)).numpy())
        stream = stream + blk.ffn(blk.norm2(stream))
        partial.append(stream.numpy())
    output = x
    for blk in blocks:
        output = blk(output)
    names = ["attention of block 0", "FFN of block 0", "attention of block 1", "FFN of block 1"]
    if all(np.abs(g - f).max() < 1e-12 for g, f in zip(got, from_input)):
        raise CheckFailed("every sublayer read the stack's input x; each sublayer reads the running stream: x plus "
                          "the writes before it")
    for i, (g, w) in enumerate(zip(got, want)):
        if np.abs(g - w).max() < 1e-12:
            continue
        if np.abs(g - partial[i]).max() < 1e-12:
            hint = "that is the stream after this sublayer (x plus every write so far); return the write alone"
        elif i % 2 and np.abs(g - blocks[i // 2].ffn(blocks[i // 2].norm2(block_input[i // 2])).numpy()).max() \
                < 1e-12:
            hint = "the FFN read the block's input; it reads the stream after attention's write, h = x + attn(...)"
        else:
            hint = "expected block.attn(block.norm1(stream)) or block.ffn(block.norm2(stream)) of the running stream"
        raise CheckFailed(f"the write of the {names[i]} is off by up to {np.abs(g - w).max():.3g}: {hint}")
    total = xn + sum(got)
    if np.abs(total - output.numpy()).max() > 1e-12:
        raise CheckFailed("x plus the writes does not equal the stack's output")


CHECKS = [("post_norm_block", check_post_norm_block), ("input_grad_ratio", check_input_grad_ratio),
          ("sublayer_writes", check_sublayer_writes)]
