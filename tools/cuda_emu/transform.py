"""Rewrites a .cu file as C++ for the CUDA emulator (tools/cuda_emu/emu.h):
kernel<<<grid, block, shared, stream>>>(args) -> ::emu::Launch(grid, block, shared, stream).run(kernel, args)
and `extern __shared__ float name[];` -> a pointer to the emulator's dynamic shared memory.
Usage: transform.py IN.cu OUT.cpp
"""
import re
import sys

source, target = sys.argv[1], sys.argv[2]
text = open(source).read()
text = re.sub(r'extern __shared__ float (\w+)\[\];', r'float* \1 = ::emu::dynamic_shared();', text)
text = re.sub(r'([\w:]+(?:<[\w:, ]+>)?)<<<(.+?)>>>\(',
              lambda m: '::emu::Launch(%s).run(%s, ' % (m.group(2), m.group(1)), text, flags=re.S)
open(target, 'w').write(text)
