#!/usr/bin/env python3
"""Compare the SASS of every GPU kernel between two builds.

Usage:
  scripts/compare_sass.py BUILD_A BUILD_B [--map OLD=NEW ...] [--objects SUBDIR] [--show N]

BUILD_A / BUILD_B are CMake build directories (or any directories holding CUDA
object files). By default the library's objects are read
(<build>/CMakeFiles/openmla_objects.dir/**/*.o; with --objects SUBDIR, every
*.o under <build>/SUBDIR; a directory without that folder: every *.o under it).

Every function in the objects' sm_* code ("Function : <mangled name>" in
`cuobjdump -sass`) is keyed by its demangled name. --map OLD=NEW rewrites
substrings of build A's names (in the order given) so that renamed kernels,
namespaces or template arguments meet their new names in build B.

Two functions are compared as
  - instruction text: the `/*addr*/` prefix dropped, branch targets turned into
    instruction-index labels, symbol names demangled and mapped like the keys;
  - encodings: both 64-bit words of every instruction (opcode, operands and the
    scheduling control bits; relocated fields are zero in an object file).
Each function prints as `identical`, `DIFFERENT` (with the first differing
instruction), `ENCODING ONLY` (same text, other control bits / encodings), or
`MISSING` in one build, with instruction counts. Exit status 0 when every
function is identical in both builds, 1 otherwise, 2 on a usage/tool error.

Needs cuobjdump (on PATH, in $CUDA_HOME/bin, or in the pip package
nvidia-cuda-cuobjdump, e.g. `python3 -m pip install "nvidia-cuda-cuobjdump==13.2.*"
"nvidia-cuda-nvdisasm==13.2.*"`) and c++filt (binutils) or cu++filt for
demangling. Installs nothing itself.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

PIP_HINT = ('cuobjdump not found: put the CUDA toolkit\'s bin on PATH, or install the pip packages '
            '`python3 -m pip install "nvidia-cuda-cuobjdump==13.2.*" "nvidia-cuda-nvdisasm==13.2.*"`')

INSTR_RE = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$')
ENCODING2_RE = re.compile(r'^\s*/\*\s*(0x[0-9a-f]{16})\s*\*/\s*$')
FUNCTION_RE = re.compile(r'^\s*Function\s*:\s*(\S+)\s*$')
# Control-flow instructions whose 0x... operand is a function-relative address.
BRANCH_OPS = ('BRA', 'BRX', 'JMP', 'JMX', 'CALL', 'BSSY', 'SSY', 'PBK', 'PCNT', 'BREAK', 'WARPSYNC', 'BMOV')
HEX_RE = re.compile(r'\b0x([0-9a-f]+)\b')
SYMBOL_RE = re.compile(r'`\(([^)]*)\)')
MANGLED_RE = re.compile(r'\b(_Z[\w$.]+)')


def find_tool(name: str) -> str | None:
    path = shutil.which(name)
    if path:
        return path
    for root in filter(None, [os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda']):
        candidate = Path(root) / 'bin' / name
        if candidate.is_file():
            return str(candidate)
    for site in {sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']}:
        for candidate in sorted(Path(site).glob(f'nvidia/*/bin/{name}')):
            if candidate.is_file():
                return str(candidate)
    return None


class Demangler:
    def __init__(self) -> None:
        self.tool = find_tool('cu++filt') or find_tool('c++filt')
        self.cache: dict[str, str] = {}

    def __call__(self, names: list[str]) -> None:
        todo = sorted({n for n in names if n not in self.cache})
        if not todo:
            return
        if self.tool is None:
            for n in todo:
                self.cache[n] = n
            return
        out = subprocess.run([self.tool], input='\n'.join(todo) + '\n', capture_output=True, text=True,
                             check=True).stdout.splitlines()
        if len(out) != len(todo):
            out = todo
        for mangled, plain in zip(todo, out):
            self.cache[mangled] = plain.strip() or mangled

    def get(self, name: str) -> str:
        return self.cache.get(name, name)


def object_files(build: Path, subdir: str | None) -> list[Path]:
    if subdir is not None:
        root = build / subdir
    elif (build / 'CMakeFiles' / 'openmla_objects.dir').is_dir():
        root = build / 'CMakeFiles' / 'openmla_objects.dir'
    else:
        root = build
    if not root.is_dir():
        sys.exit(f'compare_sass: {root} is not a directory')
    return sorted(p for p in root.rglob('*.o') if p.is_file())


class Function:
    def __init__(self, mangled: str, obj: Path) -> None:
        self.mangled = mangled
        self.obj = obj
        self.raw: list[tuple[int, str, str]] = []  # (address, text, first encoding word)
        self.enc2: list[str] = []
        self.text: list[str] = []
        self.encodings: list[str] = []


def parse_sass(sass: str, obj: Path) -> list[Function]:
    functions: list[Function] = []
    current: Function | None = None
    in_elf = False
    for line in sass.splitlines():
        if line.startswith('Fatbin elf code'):
            in_elf = True
            current = None
            continue
        if line.startswith('Fatbin ptx code'):
            in_elf = False
            current = None
            continue
        if not in_elf:
            continue
        m = FUNCTION_RE.match(line)
        if m:
            current = Function(m.group(1), obj)
            functions.append(current)
            continue
        if current is None:
            continue
        m = INSTR_RE.match(line)
        if m:
            current.raw.append((int(m.group(1), 16), m.group(2), m.group(3)))
            continue
        m = ENCODING2_RE.match(line)
        if m and len(current.enc2) < len(current.raw):
            current.enc2.append(m.group(1))
    return functions


def normalise(fn: Function, name_of) -> None:
    index_of = {addr: i for i, (addr, _, _) in enumerate(fn.raw)}

    def symbol(match: re.Match) -> str:
        sym = match.group(1)
        return '`(' + name_of(sym) + ')'

    for i, (_, text, enc1) in enumerate(fn.raw):
        text = re.sub(r'\s+', ' ', text.strip())
        opcode = text.split(' ')[1] if text.startswith('@') and ' ' in text else text.split(' ')[0]
        if opcode.split('.')[0] in BRANCH_OPS:
            def label(match: re.Match) -> str:
                addr = int(match.group(1), 16)
                return f'L{index_of[addr]}' if addr in index_of else match.group(0)
            text = HEX_RE.sub(label, text)
        text = SYMBOL_RE.sub(symbol, text)
        text = MANGLED_RE.sub(lambda m: name_of(m.group(1)), text)
        fn.text.append(text)
        fn.encodings.append(enc1 + ' ' + (fn.enc2[i] if i < len(fn.enc2) else '?'))


def load_build(build: Path, subdir: str | None, cuobjdump: str, demangle: Demangler,
               renames: list[tuple[str, str]]) -> tuple[dict[str, list[Function]], int]:
    objects = object_files(build, subdir)
    functions: list[Function] = []
    for obj in objects:
        result = subprocess.run([cuobjdump, '-sass', str(obj)], capture_output=True, text=True)
        if result.returncode != 0:
            # Host-only objects have no device code: cuobjdump says so and fails.
            continue
        functions.extend(parse_sass(result.stdout, obj))
    mangled = [f.mangled for f in functions]
    for f in functions:
        for _, text, _ in f.raw:
            mangled.extend(MANGLED_RE.findall(text))
    demangle(mangled)

    def name_of(sym: str) -> str:
        name = demangle.get(sym)
        for old, new in renames:
            name = name.replace(old, new)
        return name

    by_name: dict[str, list[Function]] = {}
    for f in functions:
        normalise(f, name_of)
        by_name.setdefault(name_of(f.mangled), []).append(f)
    return by_name, len(objects)


def first_difference(a: list[str], b: list[str]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('build_a', type=Path)
    parser.add_argument('build_b', type=Path)
    parser.add_argument('--map', action='append', default=[], metavar='OLD=NEW',
                        help="rewrite OLD to NEW in build A's demangled names (repeatable, applied in order)")
    parser.add_argument('--objects', default=None, metavar='SUBDIR',
                        help='read every *.o under BUILD/SUBDIR instead of the library objects')
    parser.add_argument('--show', type=int, default=3, metavar='N',
                        help='instructions of context to print around a first difference (default 3)')
    args = parser.parse_args()

    cuobjdump = find_tool('cuobjdump')
    if cuobjdump is None:
        print(PIP_HINT, file=sys.stderr)
        return 2
    renames = []
    for item in args.map:
        if '=' not in item:
            parser.error(f'--map expects OLD=NEW, got {item!r}')
        old, new = item.split('=', 1)
        renames.append((old, new))

    demangle = Demangler()
    if demangle.tool is None:
        print('compare_sass: no c++filt / cu++filt: comparing mangled names', file=sys.stderr)
    funcs_a, n_a = load_build(args.build_a, args.objects, cuobjdump, demangle, renames)
    funcs_b, n_b = load_build(args.build_b, args.objects, cuobjdump, demangle, [])
    print(f'A: {args.build_a} ({n_a} objects, {sum(map(len, funcs_a.values()))} functions)')
    print(f'B: {args.build_b} ({n_b} objects, {sum(map(len, funcs_b.values()))} functions)')
    if not funcs_a and not funcs_b:
        print('compare_sass: no device code found in either build', file=sys.stderr)
        return 2

    failures = 0
    for name in sorted(set(funcs_a) | set(funcs_b)):
        in_a, in_b = funcs_a.get(name, []), funcs_b.get(name, [])
        if not in_a or not in_b:
            failures += 1
            where = 'A' if in_a else 'B'
            count = len((in_a or in_b)[0].text)
            objs = ', '.join(sorted({f.obj.name for f in (in_a or in_b)}))
            print(f'MISSING in {"B" if in_a else "A"} (only in {where}, {count} instrs, {objs}): {name}')
            continue
        # A name may occur in several objects (e.g. one template in two translation
        # units): every copy in A must equal every copy in B.
        fa, fb = in_a[0], in_b[0]
        worst = 'identical'
        detail = ''
        for x in in_a:
            for y in in_b:
                if x.text != y.text:
                    worst = 'DIFFERENT'
                    i = first_difference(x.text, y.text)
                    lo = max(0, i - args.show)
                    ctx_a = '\n'.join(f'      A[{k}] {x.text[k]}' for k in range(lo, min(len(x.text), i + args.show + 1)))
                    ctx_b = '\n'.join(f'      B[{k}] {y.text[k]}' for k in range(lo, min(len(y.text), i + args.show + 1)))
                    detail = (f'    first difference at instruction {i} ({x.obj.name} vs {y.obj.name}):\n'
                              f'{ctx_a}\n{ctx_b}')
                    fa, fb = x, y
                    break
                if x.encodings != y.encodings and worst == 'identical':
                    worst = 'ENCODING ONLY'
                    i = first_difference(x.encodings, y.encodings)
                    detail = (f'    first encoding difference at instruction {i}: {x.text[i]!r}\n'
                              f'      A {x.encodings[i]}\n      B {y.encodings[i]}')
                    fa, fb = x, y
            if worst == 'DIFFERENT':
                break
        counts = (f'{len(fa.text)} instrs' if len(fa.text) == len(fb.text)
                  else f'{len(fa.text)} -> {len(fb.text)} instrs')
        print(f'{worst:<13} {counts:<22} {name}')
        if worst != 'identical':
            failures += 1
            print(detail)
    total = len(set(funcs_a) | set(funcs_b))
    print(f'{total - failures} of {total} functions identical' + (f', {failures} not' if failures else ''))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
