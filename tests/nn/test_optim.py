"""tinygrad_block/optim.py against torch.optim: SGD with momentum and AdamW with clipping and the warmup + cosine
schedule follow PyTorch's trajectories on a small LM in float64 (20 steps, 1e-12 relative at every step), run
eagerly and compiled by tb.jit (whose unfused replays equal the eager steps bit for bit); the state is tensors made
once and rebound, so a compiled step follows it; the schedule against torch's LinearLR + CosineAnnealingLR and the
formula by hand; state bytes against accounting.training_memory; frozen parameters stay put; a step undone by
snapshot/restore; bad arguments give one clear message."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import msg, rel_err, t64

import tinygrad_block as tb
from tinygrad_block import nn
from tinygrad_block.accounting import training_memory
from tinygrad_block.optim import SGD, AdamW, WarmupCosine, clip_grad_norm, warmup_cosine
from tools import torch_block

TOL = 1e-12
CFG = nn.preset("tiny").with_(d_model=16, n_heads=4, n_kv_heads=2, d_ff=24, vocab_size=32, max_seq_len=16)
B, L, STEPS = 2, 8, 20


def batches(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """STEPS batches of (ids, targets), each (B, L) random tokens."""
    r = np.random.default_rng(seed)
    return [(r.integers(0, CFG.vocab_size, (B, L)), r.integers(0, CFG.vocab_size, (B, L))) for _ in range(STEPS)]


def our_loss(model, ids, targets) -> tb.Tensor:
    logits = model(tb.tensor(ids))                                             # (B, L, V)
    return logits.reshape(-1, CFG.vocab_size).cross_entropy(tb.tensor(targets).reshape(-1))


def torch_loss(p: dict, ids, targets) -> torch.Tensor:
    """The same LM in plain PyTorch: embed -> blocks (tools/torch_block.py) -> norm -> head -> cross-entropy."""
    h = p["embed.weight"][torch.as_tensor(ids)]                                # (B, L, d_model)
    for i in range(CFG.n_layers):
        prefix = f"layers.{i}."
        h = torch_block.block_forward(h, {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)}, CFG)
    logits = torch_block.linear(p, CFG, "lm_head", torch_block.norm(p, CFG, "norm", h))
    return F.cross_entropy(logits.reshape(-1, CFG.vocab_size), torch.as_tensor(targets).reshape(-1))


def twin_models(frozen: tuple = ()):
    """Our float64 LM and a dict of torch tensors holding the same initial weights; names in `frozen` do not
    train in either."""
    model = nn.LM(CFG, generator=tb.Generator(0), dtype=tb.float64)
    for name, p in model.named_parameters():
        p.requires_grad = name not in frozen
    theirs = {n: torch.tensor(p.numpy().copy(), requires_grad=p.requires_grad) for n, p in model.named_parameters()}
    return model, theirs


def assert_same_weights(model, theirs: dict, step: int):
    for name, p in model.named_parameters():
        err = rel_err(p.numpy(), theirs[name].detach().numpy())
        assert err <= TOL, f"step {step}: {name} differs from torch.optim by {err:.2e} relative"


ENGINES = ["eager", "compiled", "compiled unfused"]


def training_step(engine: str, model, opt, max_norm: float | None = None):
    """step(ids, targets) -> (loss, gradient norm or None), 0-d tensors: zero_grad, the LM's loss, backward, clip
    (when max_norm is given), opt.step(); run eagerly or compiled by tb.jit (fused, or not)."""
    def step(ids: tb.Tensor, targets: tb.Tensor):
        opt.zero_grad()
        loss = model(ids).reshape(-1, CFG.vocab_size).cross_entropy(targets.reshape(-1))
        loss.backward()
        norm = clip_grad_norm(model.parameters(), max_norm) if max_norm else None
        opt.step()
        return loss, norm
    return step if engine == "eager" else tb.jit(step, fuse=engine == "compiled", modules=[model, opt])


# ---------------------------------------------------------------- trajectories
@pytest.mark.parametrize("engine", ENGINES)
def test_sgd_momentum_weight_decay_follows_torch(engine):
    model, theirs = twin_models()
    ours = SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    ref = torch.optim.SGD(theirs.values(), lr=0.1, momentum=0.9, weight_decay=0.01)
    step_ours = training_step(engine, model, ours)
    start = {n: p.numpy().copy() for n, p in model.named_parameters()}
    for step, (ids, targets) in enumerate(batches()):
        if step == 10:                                       # lr is an attribute: a step decay halfway
            ours.lr, ref.param_groups[0]["lr"] = 0.05, 0.05
        loss, _ = step_ours(tb.tensor(ids), tb.tensor(targets))
        loss_ref = torch_loss(theirs, ids, targets)
        assert rel_err(loss.item(), loss_ref.item()) <= TOL, f"step {step}: loss"
        ref.zero_grad()
        loss_ref.backward()
        ref.step()
        assert_same_weights(model, theirs, step)
    assert getattr(step_ours, "replays", 17) == 17           # compiled: 3 captures, then every step replayed
    moved = min(rel_err(p.numpy(), start[n]) for n, p in model.named_parameters())
    assert moved > 1e-3, "every parameter should have moved: the comparison above must not be vacuous"


@pytest.mark.parametrize("engine", ENGINES)
def test_adamw_with_clipping_and_schedule_follows_torch(engine):
    frozen = ("layers.0.norm1.weight", "layers.1.attn.k_proj.weight")
    model, theirs = twin_models(frozen)
    trained = [p for p in model.parameters() if p.requires_grad]
    kw = dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.1)
    ours, ref = AdamW(model.parameters(), **kw), torch.optim.AdamW(theirs.values(), **kw)
    step_ours = training_step(engine, model, ours, max_norm=3.5)
    schedule = WarmupCosine(ours, lr_max=3e-3, warmup=5, total=STEPS, lr_min=3e-4)
    ref_schedule = torch.optim.lr_scheduler.SequentialLR(ref, [
        torch.optim.lr_scheduler.LinearLR(ref, start_factor=1 / 5, end_factor=1.0, total_iters=4),
        torch.optim.lr_scheduler.CosineAnnealingLR(ref, T_max=STEPS - 5, eta_min=3e-4)], milestones=[5])
    start = {n: p.numpy().copy() for n, p in model.named_parameters()}
    clipped = []
    for step, (ids, targets) in enumerate(batches(1)):
        assert rel_err(ours.lr, ref.param_groups[0]["lr"]) <= TOL, f"step {step}: lr"
        loss, norm = step_ours(tb.tensor(ids), tb.tensor(targets))
        loss_ref = torch_loss(theirs, ids, targets)
        assert rel_err(loss.item(), loss_ref.item()) <= TOL, f"step {step}: loss"
        ref.zero_grad()
        loss_ref.backward()
        norm_ref = torch.nn.utils.clip_grad_norm_(theirs.values(), max_norm=3.5)
        assert rel_err(norm.item(), norm_ref.item()) <= TOL, f"step {step}: gradient norm"
        clipped.append(norm.item() > 3.5)
        ref.step()
        schedule.step(), ref_schedule.step()
        assert_same_weights(model, theirs, step)
    assert any(clipped) and not all(clipped), f"clipping should act on some steps only: {clipped}"
    for name, p in model.named_parameters():
        assert (name in frozen) == np.array_equal(p.numpy(), start[name]), f"{name}: frozen iff unchanged"
    assert [id(p) for p in model.parameters() if p.grad is not None] == [id(p) for p in trained]
    assert getattr(step_ours, "replays", 17) == 17


def test_compiled_steps_equal_eager_steps_bit_for_bit():
    """Unfused, a replay runs the eager step's kernels on the same arrays: weights, m, v and step counts agree to the
    bit (float32, where a stray rounding would show), and the state tensors are the objects made at the first step."""
    runs = {}
    for engine in ("eager", "compiled unfused"):
        model = nn.LM(CFG, generator=tb.Generator(0))
        opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        schedule, step = WarmupCosine(opt, 3e-3, warmup=5, total=STEPS), training_step(engine, model, opt, 1.0)
        losses = [step(tb.tensor(ids), tb.tensor(targets))[0].item() for ids, targets in batches(2)[:1]]
        made = [dict(s) for s in opt.state]                  # the state tensors, made by the first step
        for ids, targets in batches(2)[1:]:
            schedule.step()
            losses.append(step(tb.tensor(ids), tb.tensor(targets))[0].item())
        assert all(s[k] is t for s, m in zip(opt.state, made) for k, t in m.items())
        runs[engine] = losses, [p.numpy() for p in model.parameters()], [
            {k: t.numpy() for k, t in s.items()} for s in opt.state]
    (losses, weights, state), (losses_c, weights_c, state_c) = runs.values()
    assert losses == losses_c and all(np.array_equal(a, b) for a, b in zip(weights, weights_c))
    assert all(np.array_equal(s[k], c[k]) for s, c in zip(state, state_c) for k in s)
    assert state[0]["step"] == STEPS and state[0]["step"].dtype == np.float64


def test_lr_and_step_are_tensors_a_compiled_step_reads_afresh():
    """The lr setter writes a Python float into the same 0-d float64 tensor; AdamW's step count is a 0-d float64
    tensor; SGD's momentum buffer is one tensor object for the whole run, its .data rebound at every step."""
    p = nn.Parameter(t64([1.0, -2.0]))
    sgd = SGD([p], lr=0.5, momentum=0.9)
    lr_tensor = sgd.lr_tensor
    sgd.lr = 0.25
    assert sgd.lr == 0.25 and sgd.lr_tensor is lr_tensor and lr_tensor.item() == 0.25
    assert lr_tensor.shape == () and lr_tensor.dtype == np.float64
    buffers = []
    for _ in range(3):
        p.grad = t64([1.0, 1.0])
        sgd.step()
        buffers.append((sgd.state[0]["momentum"], sgd.state[0]["momentum"].data))
    assert buffers[0][0] is buffers[1][0] is buffers[2][0] and buffers[0][1] is not buffers[1][1]
    assert buffers[2][1].tolist() == [1 + 0.9 + 0.81] * 2    # buf = 0.9 buf + g, from 0
    adam = AdamW([p], lr=0.1)
    p.grad = t64([1.0, 1.0])
    adam.step()
    assert adam.state[0]["step"].shape == () and adam.state[0]["step"].item() == 1.0


def test_snapshot_and_restore_undo_steps():
    """restore(snapshot) puts back the arrays the snapshot kept: the weights and the state as they were, the same
    tensor objects; state made since is dropped."""
    p = nn.Parameter(t64([1.0, -2.0]))
    opt = AdamW([p], lr=0.1)
    empty = opt.snapshot()
    p.grad = t64([0.5, 0.5])
    opt.step()
    after_one, m = opt.snapshot(), opt.state[0]["m"]
    values = p.numpy().copy(), m.numpy().copy()
    p.grad = t64([0.5, 0.5])
    opt.step()
    opt.restore(after_one)
    assert np.array_equal(p.numpy(), values[0]) and opt.state[0]["m"] is m and np.array_equal(m.numpy(), values[1])
    assert opt.state[0]["step"].item() == 1.0
    opt.restore(empty)
    assert p.numpy().tolist() == [1.0, -2.0] and opt.state == [{}]


# ---------------------------------------------------------------- the rules on one tensor, by hand
def test_step_rebinds_the_parameter_and_writes_no_array():
    """The Parameter stays the same object (the model and the optimizer keep referring to it); its `.data` is a
    new array; a snapshot taken before the step (state_dict, a detached view) keeps the old values."""
    model = nn.LM(CFG, generator=tb.Generator(0), dtype=tb.float64)
    params, before = model.parameters(), model.state_dict()
    arrays, values = [p.data for p in params], {n: t.numpy().copy() for n, t in before.items()}
    opt = AdamW(params, lr=0.1)
    our_loss(model, *batches()[0]).backward()
    opt.step()
    assert all(p is q for p, q in zip(model.parameters(), params))
    assert not any(p.data is a for p, a in zip(params, arrays))
    assert all(np.array_equal(t.numpy(), values[n]) for n, t in before.items())
    assert all(not np.array_equal(p.numpy(), values[n]) for n, p in model.named_parameters())


def test_adamw_first_step_by_hand():
    """Step 1: m^ = g, v^ = g^2, so p' = p (1 - lr wd) - lr g / (|g| + eps)."""
    p0, g = np.array([1.0, -2.0, 0.5]), np.array([0.3, -0.1, 0.0])
    p = nn.Parameter(tb.tensor(p0))
    p.grad = tb.tensor(g)
    AdamW([p], lr=0.1, weight_decay=0.5).step()
    assert rel_err(p.numpy(), p0 * (1 - 0.05) - 0.1 * g / (np.abs(g) + 1e-8)) <= TOL


def test_clip_grad_norm_scales_to_max_norm():
    a, b = nn.Parameter(t64([3.0, 0.0])), nn.Parameter(t64([[0.0, 4.0]]))
    a.grad, b.grad = t64([3.0, 0.0]), t64([[0.0, 4.0]])                     # global norm 5
    assert clip_grad_norm([a, b], max_norm=1.0).item() == 5.0
    scale = 1.0 / (5.0 + 1e-6)                                               # torch's coefficient
    assert rel_err(np.concatenate([a.grad.numpy(), b.grad.numpy()[0]]), [3 * scale, 0, 0, 4 * scale]) <= TOL
    a.grad, b.grad = t64([0.3, 0.4]), None                                   # norm 0.5 < 1: untouched
    assert clip_grad_norm([a, b], max_norm=1.0).item() == pytest.approx(0.5, rel=TOL)
    assert a.grad.numpy().tolist() == [0.3, 0.4] and b.grad is None


# ---------------------------------------------------------------- the schedule
def test_warmup_cosine_by_hand():
    lr = [warmup_cosine(s, 1.0, warmup=4, total=12, lr_min=0.1) for s in range(14)]
    assert lr[:5] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])              # warmup, then the cosine's top
    assert lr[8] == pytest.approx(0.1 + 0.9 * 0.5)                           # halfway down: cos(pi/2) = 0
    assert lr[6] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    assert lr[12:] == [0.1, 0.1]                                             # the floor from `total` on
    assert warmup_cosine(0, 2.0, warmup=0, total=10) == 2.0                  # no warmup: start at the top


def test_warmup_cosine_equals_torch_schedulers():
    W, T, top, low = 7, 30, 0.02, 0.002
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=top)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / W, end_factor=1.0, total_iters=W - 1),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=T - W, eta_min=low)], milestones=[W])
    ref = []
    for _ in range(T + 1):
        ref.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rel_err([warmup_cosine(s, top, W, T, low) for s in range(T + 1)], ref) <= TOL


# ---------------------------------------------------------------- state bytes and the accounting
def test_state_bytes_equal_the_accounting():
    """float32 here: weight 4 + grad 4 + AdamW's m and v 8 = 16 bytes per parameter. The curriculum's mixed
    precision (accounting.training_memory): bf16 weight 2 + grad 2 + fp32 master copy, m and v 12 = 16."""
    model = nn.LM(CFG, generator=tb.Generator(0))                           # float32
    P = model.num_parameters()
    ids, targets = batches()[0]
    opt = AdamW(model.parameters(), lr=1e-3)
    assert opt.state_bytes() == 0                                            # state is made at the first step
    our_loss(model, ids, targets).backward()
    opt.step()
    assert opt.state_bytes() == 8 * P
    fp32 = training_memory(CFG, L, B, bytes_per_element=4, optimizer_bytes_per_param=16)
    assert fp32["optimizer"] == opt.state_bytes()
    assert fp32["parameters"] == sum(p.nbytes for p in model.parameters()) == 4 * P
    assert fp32["gradients"] == sum(p.grad.nbytes for p in model.parameters()) == 4 * P
    mixed = training_memory(CFG, L, B)                                       # bf16 weights and grads
    assert mixed["parameters"] + mixed["gradients"] + mixed["optimizer"] == 16 * P
    assert mixed["optimizer"] == 12 * P == opt.state_bytes() + 4 * P        # + an fp32 master copy


def test_state_bytes_count_trained_parameters_only():
    """Under LoRA the base weights are frozen: no gradient, no state, as the accounting counts."""
    cfg = CFG.with_(lora_rank=2)
    model = nn.LM(cfg, generator=tb.Generator(0))
    ids, targets = batches()[0]
    opt, sgd = AdamW(model.parameters(), lr=1e-3), SGD(model.parameters(), lr=1e-3, momentum=0.9)
    our_loss(model, ids, targets).backward()
    opt.step(), sgd.step()
    trained = sum(p.size for p in model.parameters() if p.requires_grad)
    assert trained < model.num_parameters()
    assert opt.state_bytes() == 8 * trained == training_memory(cfg, L, B, 4, 16)["optimizer"]
    assert sgd.state_bytes() == 4 * trained                                  # one momentum buffer
    assert SGD(model.parameters(), lr=1e-3).state_bytes() == 0               # plain SGD keeps nothing


def test_runs_on_every_device(device):
    """The same steps on another device give the CPU's numbers (on 'strict', with no read back to the host)."""
    def train(on):
        model = nn.LM(CFG, generator=tb.Generator(0), dtype=tb.float64).to(on)
        adam, sgd = AdamW(model.parameters()[::2], lr=1e-2), SGD(model.parameters()[1::2], lr=0.1, momentum=0.9)
        for ids, targets in batches()[:2]:
            logits = model(tb.tensor(ids, device=on))
            logits.reshape(-1, CFG.vocab_size).cross_entropy(tb.tensor(targets, device=on).reshape(-1)).backward()
            clip_grad_norm(model.parameters(), 0.5)
            adam.step(), sgd.step(), adam.zero_grad(), sgd.zero_grad()
        return model, adam.state_bytes() + sgd.state_bytes()
    model, state = train(device)
    cpu, _ = train("cpu")
    params = model.parameters()
    assert state == 16 * sum(p.size for p in params[::2]) + 8 * sum(p.size for p in params[1::2])   # float64
    for p, q in zip(model.parameters(), cpu.parameters()):
        assert rel_err(p.to("cpu").numpy(), q.numpy()) <= TOL


def test_meta_device_counts_state_without_values():
    model = nn.LM(CFG, generator=tb.Generator(0), device="meta")
    ids = tb.zeros(B, L, dtype=tb.int64, device="meta")
    opt = AdamW(model.parameters(), lr=1e-3)
    model(ids).sum().backward()
    clip_grad_norm(model.parameters(), 1.0)
    opt.step()
    assert opt.state_bytes() == 8 * model.num_parameters()
    assert all(p.device == "meta" for p in model.parameters())


# ---------------------------------------------------------------- bad input
def one_param():
    return [nn.Parameter(tb.zeros(3))]


BAD = [
    (lambda: SGD(one_param(), lr=-0.1), ValueError, ("SGD", "lr", "-0.1")),
    (lambda: SGD(one_param(), lr=float("nan")), ValueError, ("SGD", "lr", "nan")),
    (lambda: SGD(one_param(), lr="0.1"), TypeError, ("SGD", "lr", "str")),
    (lambda: SGD(one_param(), lr=True), TypeError, ("SGD", "lr", "bool")),
    (lambda: SGD(one_param(), lr=0.1, momentum=-0.5), ValueError, ("SGD", "momentum", "-0.5")),
    (lambda: SGD(one_param(), lr=0.1, momentum=1.0), ValueError, ("SGD", "momentum", "[0.0, 1.0)")),
    (lambda: SGD(one_param(), lr=0.1, weight_decay=-1), ValueError, ("SGD", "weight_decay", "-1")),
    (lambda: AdamW(one_param(), lr=0.1, betas=(0.9, 1.0)), ValueError, ("AdamW", "betas[1]", "1.0")),
    (lambda: AdamW(one_param(), lr=0.1, betas=(float("nan"), 0.9)), ValueError, ("AdamW", "betas[0]", "nan")),
    (lambda: AdamW(one_param(), lr=0.1, betas=0.9), TypeError, ("AdamW", "betas", "0.9")),
    (lambda: AdamW(one_param(), lr=0.1, eps=-1e-8), ValueError, ("AdamW", "eps", "-1e-08")),
    (lambda: AdamW(one_param(), lr=0.1, weight_decay=float("nan")), ValueError, ("AdamW", "weight_decay", "nan")),
    (lambda: AdamW([], lr=0.1), ValueError, ("AdamW", "params is empty")),
    (lambda: AdamW(nn.Linear(2, 2, generator=tb.Generator(0)), lr=0.1), TypeError, ("AdamW", "Linear")),
    (lambda: SGD(one_param() + [np.zeros(3)], lr=0.1), TypeError, ("SGD", "params[1]", "ndarray")),
    (lambda: SGD([nn.Parameter(tb.zeros(3)) * 2], lr=0.1), TypeError, ("SGD", "params[0]", "leaf")),
    (lambda: SGD([tb.zeros(3, dtype=tb.int64)], lr=0.1), TypeError, ("SGD", "params[0]", "int64")),
    (lambda: AdamW(one_param() + [nn.Parameter(tb.zeros(3, device="meta"))], lr=0.1), RuntimeError,
     ("AdamW", "different devices", "cpu", "meta")),
    (lambda: AdamW(one_param() * 2, lr=0.1), ValueError, ("AdamW", "more than once")),
    (lambda: clip_grad_norm(one_param(), max_norm=-1.0), ValueError, ("clip_grad_norm", "max_norm", "-1.0")),
    (lambda: warmup_cosine(0, 1.0, warmup=10, total=5), ValueError, ("warmup_cosine", "total=5", "warmup=10")),
    (lambda: warmup_cosine(-1, 1.0, warmup=1, total=5), ValueError, ("warmup_cosine", "step", "-1")),
    (lambda: warmup_cosine(0, 1.0, warmup=1, total=5, lr_min=2.0), ValueError, ("warmup_cosine", "lr_min", "2.0")),
]


@pytest.mark.parametrize("make, error, fragments", BAD)
def test_bad_arguments(make, error, fragments):
    with pytest.raises(error, match=msg(None, *fragments)):
        make()


def test_bad_lr_set_later_and_misshaped_grad():
    p, q = nn.Parameter(tb.ones(2)), nn.Parameter(tb.zeros(3))
    opt = SGD([p, q], lr=0.1)
    with pytest.raises(ValueError, match=msg(None, "SGD", "lr", "inf")):
        opt.lr = -math.inf
    p.grad, q.grad = tb.ones(2), tb.zeros(1)                                 # q's would broadcast silently
    with pytest.raises(ValueError, match=msg(None, "SGD", "(1,)", "(3,)")):
        opt.step()
    assert p.numpy().tolist() == [1.0, 1.0]                                  # checked before anything moved
