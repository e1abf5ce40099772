"""Convert one demo model (a Hugging Face directory) to f16 GGUF with llama.cpp's converter.

Run with the *engine's* Python (the converter needs torch and transformers)::

    .engine-venv/bin/python agent_supervisor/demo/gguf_convert.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf

``LLAMA_CPP_DIR`` is the llama.cpp source vendored by llama-cpp-python (its
``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/``). The vendored converter
identifies a BPE pre-tokenizer by hashing how it splits a fixed text, and refuses one it
does not know ("BPE pre-tokenizer was not recognized"): the demo's tokenizer is a freshly
trained byte-level BPE with the GPT-2 pre-tokenizer (``agent_supervisor/demo/build_models.py``),
so ``TextModel.get_vocab_base_pre`` is made to answer ``gpt-2`` here, at run time, without
editing the vendored file. Self-contained (the engine's environment has an unrelated
package named ``supervisor``).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    llama, model, out = (Path(a).resolve() for a in sys.argv[1:])
    sys.path[:0] = [str(llama), str(llama / "gguf-py")]
    from conversion import base  # the vendored converter's package

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    tmp = out.with_suffix(".part")
    sys.argv = [str(llama / "convert_hf_to_gguf.py"), str(model), "--outfile", str(tmp),
                "--outtype", "f16"]
    try:
        runpy.run_path(str(llama / "convert_hf_to_gguf.py"), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            return int(exc.code) if isinstance(exc.code, int) else 1
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
