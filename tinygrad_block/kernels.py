"""Kernels you can read: a kernel is one loop over the elements of its output, whose body computes each element
from the inputs' elements with elementwise primitives, one line per primitive, named after it, with its shape in
a comment. An input is read through its strides, so a broadcast input (stride 0 along an axis) costs nothing.

This file is the language (and Ufunc, the one piece both backends share to lay out an eager exp or log): which
primitives share a kernel is the plan's (fuse.py), and how a kernel runs is a backend's (cpu_kernels.py renders it
as C for the CPU, cuda_kernels.py as CUDA C). The body is the same text in every
language that has C's expressions (C, CUDA C); only the loop around it, which finds the index, differs.

    float x0 = in0[i0 * 172 + i1];          // in0 (16, 172) float32
    float neg_1 = -x0;                      // neg (16, 172)   ffn
    float exp_2 = tb_expf(neg_1);           // exp (16, 172)   ffn

exp and log are this file's own (MATH): twenty lines of C each language includes, which the CPU's and the GPU's
backends also run for an eager `exp` or `log`, so a compiled replay computes what eager computes, bit for bit.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

# each primitive's value from its operands ({0}, {1}): the ops IEEE 754 rounds once, exactly, so a kernel computes
# what numpy's functions compute, bit for bit, in any order of elements (NaN wins in maximum, as in numpy's); and
# exp and log, MATH's, which eager runs too. sin and cos are not among them: each math library rounds them its own
# way in the last bits, and eager runs the array library's.
EXPR = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "neg": "-{0}",
        "reciprocal": "1 / {0}", "sqrt": "sqrt{f}({0})", "maximum": "({0} >= {1} || {0} != {0}) ? {0} : {1}",
        "exp": "tb_exp{f}({0})", "log": "tb_log{f}({0})", "where": "{0} ? {1} : {2}",
        "less": "{0} < {1}", "less_equal": "{0} <= {1}", "equal": "{0} == {1}", "not_equal": "{0} != {1}",
        "greater": "{0} > {1}", "greater_equal": "{0} >= {1}"}
# maximum(a, b) keeping, of two equal values (zeros of both signs), the first or the second: numpy's float32 and
# float64 keep the second on x86 (its max instruction's rule), float16 the first (cpu_kernels.maximum_ties asks)
MAXIMUM = {"first": EXPR["maximum"], "second": "({0} > {1} || {0} != {0}) ? {0} : {1}"}
SELECT = {"where"} | {"less", "less_equal", "equal", "not_equal", "greater", "greater_equal"}   # nothing to round
# e^x and ln x as every kernel computes them, in double and in float, from + - * / alone, so that
# C and CUDA C compute the same bits (no fused multiply-adds in either: see their flags). Each language defines
# TB_FN (how it declares a function a kernel calls), tb_bits and tb_double (a double's 64 bits as an unsigned long
# long, and back), tb_bitsf and tb_float (a float's 32, as an unsigned int), INFINITY and NAN. Whole numbers stay
# in floating point (no conversions to integers and back, which some vector units lack).
MATH = r"""
/* 2^n for a whole number n in -1022 .. 1023, made from its bits: n + 1023 in the exponent field (adding 1.5 * 2^52
   to n puts n in a double's low bits) */
TB_FN double tb_pow2(double n) { return tb_double((tb_bits(n + 6755399441055744.0) + 1023) << 52); }

/* e^x = 2^k e^r: k = round(x / ln 2), r = x - k ln 2, |r| <= ln 2 / 2 (ln 2 in two parts; k times the first: exact) */
TB_FN double tb_exp(double x) {
  x = x > 710.0 ? 710.0 : (x < -746.0 ? -746.0 : x);          /* e^x is inf, or 0, past these; NaN stays NaN */
  double k = rint(x * 1.4426950408889634);
  double r = (x - k * 0.6931471803691238) - k * 1.9082149292705877e-10;
  double p = 1.0;                    /* e^r = 1 + r (1 + r/2 (1 + r/3 (... (1 + r/13)))): Taylor's series to r^13 */
  for (int j = 13; j >= 1; j--) p = 1.0 + p * r * (1.0 / j);
  double h = rint(k * 0.5);                         /* times 2^k as 2^h 2^(k - h), each half a normal double, */
  return p * tb_pow2(h) * tb_pow2(k - h);           /* so a result too small to be normal is rounded once */
}

/* ln x = e ln 2 + ln m for x = m 2^e, m in [sqrt(1/2), sqrt(2)): e and m read off x's bits */
TB_FN double tb_log(double x) {
  int tiny = x < 2.2250738585072014e-308;                         /* a subnormal x: times 2^54 first */
  unsigned long long b = tb_bits(tiny ? x * 18014398509481984.0 : x);
  double e = tb_double((b >> 52 & 2047) | 0x4330000000000000ULL) - 4503599627370496.0 - (tiny ? 1077.0 : 1023.0);
  double m = tb_double((b & 0xfffffffffffffULL) | 0x3ff0000000000000ULL);      /* x's digits, exponent 0: [1, 2) */
  e = m > 1.4142135623730951 ? e + 1.0 : e;
  m = m > 1.4142135623730951 ? m * 0.5 : m;
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, q = 0.0;  /* ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), */
  for (int j = 21; j >= 3; j -= 2) q = (q + 1.0 / j) * s2;                  /* |s| <= 0.172: to s^21 */
  double y = e * 0.6931471803691238 + (2.0 * s + (2.0 * s * q + e * 1.9082149292705877e-10));
  return x > 0.0 ? (x < INFINITY ? y : x) : (x == 0.0 ? -INFINITY : NAN);
}

/* the same two in float, for float32 and float16: a float's vector holds twice a double's lanes. ln 2's first part
   has 16 bits (k times it is exact for every k that matters); the series stop sooner (at r^7 and s^11) */
TB_FN float tb_pow2f(float n) { return tb_float((tb_bitsf(n + 12582912.0f) + 127) << 23); }

TB_FN float tb_expf(float x) {
  x = x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x);
  float k = rintf(x * 1.44269504f);
  float r = (x - k * 0.693145751953125f) - k * 1.42860677e-06f;
  float p = 1.0f;
  for (int j = 7; j >= 1; j--) p = 1.0f + p * r * (1.0f / j);
  float h = rintf(k * 0.5f);
  return p * tb_pow2f(h) * tb_pow2f(k - h);
}

TB_FN float tb_logf(float x) {
  int tiny = x < 1.17549435e-38f;                                  /* a subnormal x: times 2^24 first */
  unsigned int b = tb_bitsf(tiny ? x * 16777216.0f : x);
  float e = tb_float((b >> 23 & 255) | 0x4b000000u) - 8388608.0f - (tiny ? 151.0f : 127.0f);
  float m = tb_float((b & 0x7fffffu) | 0x3f800000u);
  e = m > 1.41421356f ? e + 1.0f : e;
  m = m > 1.41421356f ? m * 0.5f : m;
  float s = (m - 1.0f) / (m + 1.0f), s2 = s * s, q = 0.0f;
  for (int j = 11; j >= 3; j -= 2) q = (q + 1.0f / j) * s2;
  float y = e * 0.693145751953125f + (2.0f * s + (2.0f * s * q + e * 1.42860677e-06f));
  return x > 0.0f ? (x < INFINITY ? y : x) : (x == 0.0f ? -INFINITY : NAN);
}
"""
# the type each dtype is computed in: float16 in float, each result rounded to float16 at once (HALF_ROUND, as
# numpy and CuPy compute float16: in float32, rounded back after every op); each language names the type it is
# stored as (C's _Float16, CUDA's __half) and defines HALF_LOAD, HALF_ROUND and HALF_STORE
TYPES = {"float16": "float", "float32": "float", "float64": "double"}
BOOL = "int"              # a comparison's result, and a mask read in (stored as a byte: a vector unit widens it)


@dataclass(frozen=True)
class Operand:
    """An array a kernel reads (`in0`, `in1`, ...) or writes (`out`), with its strides in elements along each axis
    of the loop (0 where it is broadcast)."""
    name: str
    shape: tuple
    dtype: str
    strides: tuple


@dataclass(frozen=True)
class Line:
    """One primitive of the body: `var = op(args)`; `instruction` is the program's record of that call (its shape
    and module)."""
    var: str
    op: str
    args: tuple
    instruction: object


@dataclass
class Kernel:
    """One loop over `shape` (the output's, its axes merged where every operand allows) computing `out` from
    `inputs`. `instructions`: the primitive calls it runs; `flops`: theirs, by the engine's rules; `bytes`: what it
    reads and writes (each input once, the output once)."""
    name: str
    shape: tuple
    dtype: str
    inputs: list
    out: Operand
    lines: list
    instructions: list
    flops: int = 0
    bytes: int = 0
    loads: dict = field(default_factory=dict)          # input name -> the variable its element is loaded into
    reads: tuple = ()                                  # the program's index of each input's array, in order
    numbers: list = field(default_factory=list)        # (variable, value) of each constant, written as a literal
    reduce: str = ""                 # a row's 'sum' (in numpy's pairwise order) or 'max' over `shape`'s last axis

    def body(self, index: list[str], ties: str = "first") -> list[str]:
        """The loop's body, one line per load, primitive and store, given the names of the loop's index variables
        (one per axis of `shape`, outermost first): the same text in C and CUDA C. `ties`: which of two equal values
        a maximum keeps (MAXIMUM)."""
        t, f = TYPES[self.dtype], "" if self.dtype == "float64" else "f"
        half = self.dtype == "float16"
        load, rounded, store = ("HALF_LOAD({})", "HALF_ROUND({})", "HALF_STORE({})") if half else ("{}",) * 3
        lines = []
        for op in self.inputs:
            mask = op.dtype == "bool"
            element = (load if not mask else "{}").format(f"{op.name}[{offset(op, index)}]")
            lines.append((f"{BOOL if mask else t} {self.loads[op.name]} = {element};",
                          f"{op.name} {op.shape} {op.dtype}"))
        for var, value in self.numbers:
            lines.append((f"{t} {var} = {literal(value)};", f"the constant {short(value, self.dtype)}"))
        for ln in self.lines:
            where = comment(".".join(ln.instruction.scope))
            value = (MAXIMUM[ties] if ln.op == "maximum" else EXPR[ln.op]).format(*ln.args, f=f)
            kind = BOOL if str(ln.instruction.dtype) == "bool" else t
            lines.append((f"{kind} {ln.var} = {value if ln.op in SELECT else rounded.format(value)};",
                          f"{ln.op} {ln.instruction.shape}" + (f"   {where}" if where else "")))
        result = store.format(self.lines[-1].var)
        lines.append((f"{self.out.name}[{offset(self.out, index)}] = {result};", "the result"))
        width = max(len(code) for code, _ in lines)
        return [f"{code:<{width}}   // {comment}" for code, comment in lines]

    def describe(self) -> str:
        """What it computes, in a line: its primitives joined by >, the output's shape and dtype."""
        ops = [ln.op for ln in self.lines] + ([self.reduce] if self.reduce else [])
        return f"{' > '.join(ops)}   {self.out.shape} {self.dtype}"

    def row(self, lanes: tuple = (0,), ties: str = "first") -> tuple[list[str], list[str]]:
        """A row reduction's element and its reduction: (the lines computing element i of a row from inputs that
        point at the row's start, the sum or the max of n of them): the same text in C and CUDA C (TB_FN), numpy's
        result exactly. A sum in numpy's order: below 8 elements one by one from 0; up to 128, eight running sums
        over every eighth element, added in pairs, then the rest; above, the two halves (split at a multiple of 8)
        summed apart and added. A max keeps a NaN, and of two equal values the one numpy's maximum.reduce keeps
        (which decides the sign of a zero): with one lane (`lanes` (0,)), the later; with numpy's vector lanes
        (`lanes`: their number is len(lanes), listed in the order a tie goes to the next, cpu_kernels.max_lanes),
        after the first element every len(lanes)-th one shares a lane, each lane keeps its later, the lanes are
        taken in that order, and the elements past the last whole vector one by one. `ties` as body's. A mask input
        (a comparison's bool) is read as the bytes it is stored in, as the kernel's own parameters read it."""
        t, zero = TYPES[self.dtype], "0.0" if self.dtype == "float64" else "0.0f"
        params = ", ".join(f"const {'unsigned char' if op.dtype == 'bool' else t} *{op.name}" for op in self.inputs)
        names = ", ".join(op.name for op in self.inputs)
        one = Kernel(self.name, (self.shape[-1],), self.dtype,
                     [Operand(op.name, op.shape, op.dtype, op.strides[-1:]) for op in self.inputs],
                     Operand("out", (self.shape[-1],), self.dtype, (1,)), self.lines, self.instructions,
                     loads=self.loads,
                     numbers=self.numbers)
        body = one.body(["i"], ties)[:-1]
        result = self.lines[-1].var if self.lines else self.loads[self.inputs[0].name]
        at = [f"TB_FN {t} {self.name}_at({params}, long i) {{", *[f"  {line}" for line in body],
              f"  return {result};", "}"]
        step = ", ".join(f"{op.name} + h * {op.strides[-1]}" for op in self.inputs)
        r = f"{self.name}_at({names}, "
        if self.reduce == "max":
            return at, max_row(f"TB_FN {t} {self.name}_max({params}, long n) {{", t, r, lanes)
        pairwise = [f"TB_FN {t} {self.name}_pairwise({params}, long n) {{",
                    f"  if (n < 8) {{ {t} s = {zero}; for (long i = 0; i < n; i++) s += {r}i); return s; }}",
                    "  if (n <= 128) {",
                    f"    {t} p[8]; long i;",
                    f"    for (int j = 0; j < 8; j++) p[j] = {r}j);",
                    f"    for (i = 8; i < n - n % 8; i += 8) for (int j = 0; j < 8; j++) p[j] += {r}i + j);",
                    f"    {t} s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));",
                    f"    for (; i < n; i++) s += {r}i);",
                    "    return s;",
                    "  }",
                    "  long h = n / 2;",
                    "  h -= h % 8;",
                    f"  return {self.name}_pairwise({names}, h) + {self.name}_pairwise({step}, n - h);",
                    "}"]
        return at, pairwise

    def row_sum(self, index: list[str]) -> str:
        """The statement that writes one row's sum (or max), given the row's index variables (its axes but the
        last)."""
        zero = "0.0" if self.dtype == "float64" else "0.0f"
        starts = ", ".join(f"{op.name} + {offset(Operand(op.name, op.shape, op.dtype, op.strides[:-1]), index)}"
                           for op in self.inputs)
        out = offset(Operand("out", self.out.shape, self.dtype, self.out.strides[:-1]), index)
        if self.reduce == "max":
            return f"out[{out}] = {self.name}_max({starts}, {self.shape[-1]});"
        return f"out[{out}] = {zero} + {self.name}_pairwise({starts}, {self.shape[-1]});"

    def head(self, stored: dict, restrict: str) -> tuple[str, str]:
        """(the comment above the function, its parameters): each input read-only, the output written, typed as a
        language stores each dtype (`stored`), with its word for pointers that never overlap (`restrict`)."""
        params = [f"const {stored[op.dtype]} *{restrict} {op.name}" for op in self.inputs]
        params.append(f"{stored[self.dtype]} *{restrict} out")
        return f"/* {self.name}: {self.describe()}; {self.flops:,} FLOPs, {self.bytes:,} bytes */", ", ".join(params)


def max_row(head: str, t: str, r: str, lanes: tuple) -> list[str]:
    """A row max's function (Kernel.row): `head` its first line, `t` its C type, `r` the call of the row's element
    function up to its index, `lanes` as Kernel.row takes them."""
    keep = "m = (v >= m || v != v) ? v : m;"                   # the later of two equal values, a NaN kept
    w = len(lanes)
    if w == 1:
        return [head, f"  {t} m = {r}0);", f"  for (long i = 1; i < n; i++) {{ {t} v = {r}i); {keep} }}",
                "  return m;", "}"]
    return [head,
            f"  static const int order[{w}] = {{{', '.join(map(str, lanes))}}};   // the lanes, as ties go",
            f"  {t} m = {r}0);",
            f"  long whole = (n - 1) - (n - 1) % {w};                   // elements 1 to whole: {w} lanes",
            "  if (whole > 0) {",
            f"    {t} lane[{w}];",
            f"    for (int j = 0; j < {w}; j++) lane[j] = m;",
            f"    for (long i = 1; i <= whole; i += {w})",
            f"      for (int j = 0; j < {w}; j++) {{ {t} v = {r}i + j); "
            "lane[j] = (v >= lane[j] || v != v) ? v : lane[j]; }",
            "    m = lane[order[0]];",
            f"    for (int j = 1; j < {w}; j++) {{ {t} v = lane[order[j]]; {keep} }}",
            "  }",
            f"  for (long i = whole + 1; i < n; i++) {{ {t} v = {r}i); {keep} }}   // the rest one by one",
            "  return m;",
            "}"]


MATH_OPS = ("exp", "log")                    # MATH's ops, which the backends also run eagerly


def unary(op: str, dtype: str, x: str) -> str:
    """The value of one elementwise op on `x` (an element as stored), rounded as a kernel's line rounds it and
    ready to store: what an eager call of a backend's generated exp or log writes."""
    half = dtype == "float16"
    value = EXPR[op].format(f"HALF_LOAD({x})" if half else x, f="" if dtype == "float64" else "f")
    return f"HALF_STORE(HALF_ROUND({value}))" if half else value


class Ufunc:
    """One of MATH's ops as numpy's ufunc is called, `f(a)` or `f(a, out=b)` (fuse.py's chains write in place):
    `run(n_elements, a, out)` does the work on arrays laid out alike in one block of memory; any other layout is
    copied to rows first (numpy or CuPy: `xp`). Another dtype (an int) goes to the array library's function."""

    def __init__(self, op: str, run, xp):
        self.op, self.run, self.xp, self.__name__ = op, run, xp, op

    def __call__(self, a, out=None):
        xp = self.xp
        if a.dtype.name not in TYPES:
            return getattr(xp, self.op)(a, out=out)
        a = xp.asarray(a)
        result = out if out is not None else xp.empty_like(a)
        if a.strides == result.strides and (a.flags.c_contiguous or a.flags.f_contiguous):
            self.run(a.size, a, result)
        else:
            rows = xp.ascontiguousarray(a)
            target = result if result.flags.c_contiguous else xp.empty(a.shape, a.dtype)
            self.run(a.size, rows, target)
            if target is not result:
                result[...] = target
        return result if out is not None or a.ndim else result[()]


def layout(shape: tuple, strides: tuple) -> tuple[tuple, tuple]:
    """How to allocate an array of `shape` laid out as `strides` say (eager's layout of a result): (the shape to
    allocate in row-major order, the transpose that puts its axes back in order)."""
    order = sorted(range(len(shape)), key=lambda a: -strides[a])                  # outermost first
    return tuple(shape[a] for a in order), tuple(order.index(a) for a in range(len(order)))


def literal(value: float) -> str:
    """A number as C writes it, exactly: the shortest decimal that reads back as the same double (a float32's
    value is a double too); infinities and NaN by their names in math.h."""
    if value != value:
        return "NAN"
    if value in (math.inf, -math.inf):
        return "INFINITY" if value > 0 else "-INFINITY"
    text = repr(float(value))
    return text if any(c in text for c in ".en") else text + ".0"


def short(value: float, dtype: str) -> str:
    """A number as a person writes it: the fewest digits that read back as the same `dtype` value (literal() is
    what the compiler reads, every digit of the double)."""
    if value != value or abs(value) == math.inf:
        return literal(value)
    size = {"float16": "e", "float32": "f"}.get(dtype)
    same = (lambda x: struct.pack(size, x) == struct.pack(size, value)) if size else value.__eq__
    return next(text for p in range(1, 18) if same(float(text := f"{value:.{p}g}")))


def comment(text: str) -> str:
    """`text` (a module's name: anybody's) safe inside a // comment: every character that could end the comment or
    continue it onto the next line (a line break, a backslash, any other control character) shown as `?`."""
    return "".join(c if c.isprintable() and c != "\\" else "?" for c in text)


def offset(op: Operand, index: list[str]) -> str:
    """The element offset of `op` at the loop's index: the sum of index * stride over the axes it moves along."""
    terms = [i if s == 1 else f"{i} * {s}" for i, s in zip(index, op.strides) if s != 0]
    return " + ".join(terms) or "0"


def element_strides(shape: tuple, strides: tuple, itemsize: int, loop: tuple) -> tuple:
    """An array's strides in elements along each axis of the loop's shape `loop`, numpy's broadcasting rule
    applied (shapes aligned on the right; an axis of length 1, or one it lacks, has stride 0)."""
    pad = len(loop) - len(shape)
    out = [0] * pad
    for n, st in zip(shape, strides):
        out.append(0 if n == 1 else st // itemsize)
    return tuple(out)


def merge_axes(shape: tuple, operands: list[tuple]) -> tuple[tuple, list[tuple]]:
    """The loop's shape with neighbouring axes merged wherever every operand steps through them as one
    (stride[a] == stride[a + 1] * shape[a + 1]), and axes of length 1 dropped: fewer, longer loops."""
    dims = [(n, [st[a] for st in operands]) for a, n in enumerate(shape) if n != 1]
    merged = []
    for n, st in dims:
        if merged and all(prev == s * n for prev, s in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    if not merged:
        merged = [(1, [0] * len(operands))]
    new_shape = tuple(n for n, _ in merged)
    return new_shape, [tuple(st[i] for _, st in merged) for i in range(len(operands))]


def op_name(instruction) -> str | None:
    """The name the language gives a primitive call: its op's (add, exp, where), a comparison's own (less, equal);
    None for a call with other parameters (a pow's exponent, a sum's axes), which no line computes."""
    if instruction.op.name == "compare":
        return instruction.params.get("op")
    return None if instruction.params else instruction.op.name


def build(name: str, instructions: list, operand, out_strides: tuple, constant=lambda k: None) -> Kernel | None:
    """The kernel that computes `instructions` (elementwise primitives of one output shape, in order, each reading what
    came before it or arrays from outside) in one loop; None when one of them is not in this language. Every value
    has the result's dtype, or is a mask (bool: a comparison's result, a where's condition).
    operand(k) -> (shape, dtype, strides in bytes, itemsize) of array k read from outside; constant(k) -> the
    number array k always holds when it is a constant of the program (written into the source), else None.
    `out_strides`: the layout (bytes) the result must have, the one eager gives it."""
    last = instructions[-1]
    dtype = str(last.dtype)
    summed = reduces_last_axis(last)
    if summed:
        if dtype not in ("float32", "float64") or not instructions[:-1] or last.ins[0] != instructions[-2].out:
            return None
        instructions, total = instructions[:-1], last
        last = instructions[-1]
    if dtype not in TYPES or any(op_name(s) not in EXPR or str(s.dtype) not in (dtype, "bool")
           for s in instructions):
        return None
    made, outside, lines, numbers = {}, {}, [], {}  # instruction slot -> its variable; outside index -> input number
    for n, s in enumerate(instructions):
        args = []
        for k in s.ins:
            if k in made:
                args.append(made[k])
            elif (value := constant(k)) is not None:
                numbers.setdefault(k, (f"c{len(numbers)}", value))
                args.append(numbers[k][0])
            else:
                outside.setdefault(k, len(outside))
                args.append(f"x{outside[k]}")
        made[s.out] = var = f"{op_name(s)}_{n}"
        lines.append(Line(var, op_name(s), tuple(args), s))
    loop = tuple(last.shape)
    specs = {k: operand(k) for k in outside}
    if any(str(sp[1]) not in (dtype, "bool") for sp in specs.values()):
        return None
    strides = [element_strides(sp[0], sp[2], sp[3], loop) for sp in specs.values()]
    if summed:                       # the sum's output, read along the loop's axes: 0 along the summed one
        out_elem = element_strides(loop[:-1], out_strides[:len(loop) - 1], last.dtype.itemsize, loop[:-1]) + (0,)
        rows, merged = merge_axes(loop[:-1], [st[:-1] for st in strides + [out_elem]])
        shape, merged = rows + loop[-1:], [m + (st[-1],) for m, st in zip(merged, strides + [out_elem])]
    else:
        out_elem = element_strides(loop, out_strides, last.dtype.itemsize, loop)
        shape, merged = merge_axes(loop, strides + [out_elem])
    inputs = [Operand(f"in{i}", tuple(sp[0]), str(sp[1]), merged[i]) for i, sp in enumerate(specs.values())]
    out_shape = tuple(total.shape) if summed else loop
    kernel = Kernel(name, shape, dtype, inputs, Operand("out", out_shape, dtype, merged[-1]), lines,
                    list(instructions) + ([total] if summed else []), reduce=summed)
    kernel.loads = {f"in{i}": f"x{i}" for i in range(len(inputs))}
    kernel.reads, kernel.numbers = tuple(outside), list(numbers.values())
    kernel.flops = sum(s.flops for s in kernel.instructions)
    kernel.bytes = sum(math.prod(sp[0]) * sp[3] for sp in specs.values()) + \
        math.prod(out_shape) * last.dtype.itemsize
    return kernel


def reduces_last_axis(instruction) -> str:
    """'sum' or 'max' when `instruction` reduces its input's last axis alone (a row's sum or max), which a kernel may
    end with; '' otherwise."""
    if instruction.op.name not in ("sum", "max") or len(instruction.params.get("axes", ())) != 1:
        return ""
    rank = len(instruction.shape) + (0 if instruction.params["keepdims"] else 1)
    return instruction.op.name if instruction.params["axes"][0] % rank == rank - 1 else ""


def sums_last_axis(instruction) -> bool:
    """Whether `instruction` is a sum over its input's last axis alone (a row sum)."""
    return reduces_last_axis(instruction) == "sum"
