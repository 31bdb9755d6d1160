"""Fusion of a captured program (compiled.py), and the program as text."""
from __future__ import annotations


def fuse_program(program, rec):
    return program.plain, []


def describe(program) -> str:
    lines = [f"program: {len(program.kernels)} kernels ({len(program.plain)} primitives)"]
    for i, k in enumerate(program.kernels):
        s = k.step
        lines.append(f"  {i:4d}  {s.op.name:<10} {str(s.shape):<18} {'.'.join(s.scope)} {s.step}")
    return "\n".join(lines)
