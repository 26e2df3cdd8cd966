"""A Gemma GGUF file to a transformers folder (safetensors + fast tokenizer), one tensor at a time.

transformers can load a GGUF directly, but for the embedded model that costs about two minutes
and 3 GB: its reader parses the 262k-entry vocabulary into Python objects twice, and it
dequantises every tensor to float32 before the model exists. Here the file's tensor table is
read once (the vocabulary is skipped, not parsed), each tensor is dequantised in row blocks
straight into the stored dtype, and only the output (536 MB in bfloat16) is ever held whole.
transformers still provides what it knows: the config keys, the GGUF-to-HF tensor names and
their fixes (Gemma stores its norms as ``w + 1``), and the tokenizer built from the vocabulary.

Example
-------
>>> from interplab.core.loading.gguf import convert_gguf
>>> convert_gguf(Path("gemma-3-270m-q4_k_m.gguf"), Path("out/"))   # out/ must exist and be empty
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: The GGUF architectures converted here and their transformers ``model_type`` (a GGUF holds only the text backbone).
ARCHITECTURES = {"gemma3": "gemma3_text", "llama": "llama"}
#: Tensors whose fix mixes rows (llama's query and key heads are stored permuted): converted whole, not in blocks.
_WHOLE = (".attn_q.", ".attn_k.")
_ROWS_PER_BLOCK = 16_384
# GGUF metadata value types of fixed width (gguf.GGUFValueType): u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64
_WIDTH = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class GgufTensor(NamedTuple):
    """One tensor of a GGUF file: where its bytes lie and how they are stored."""

    name: str
    shape: tuple[int, ...]  # torch order: [rows, columns]
    qtype: int  # gguf.GGMLQuantizationType
    start: int  # byte offset in the file
    nbytes: int


def tensor_table(path: Path) -> list[GgufTensor]:
    """The tensors of a GGUF file (v2 or v3), checked to lie inside it; no tensor data is read.

    >>> [t.name for t in tensor_table(Path("model.gguf"))][:2]
    ['output_norm.weight', 'token_embd.weight']
    """
    import gguf

    header = Header(path)
    if header.size < 24 or bytes(header.blob[:4]) != b"GGUF":
        raise ValueError(f"{str(path)!r} is not a GGUF file (it does not start with the GGUF magic bytes).")
    version, n_tensors, n_kv = header.unpack("<IQQ", 4)
    if version not in (2, 3):
        raise ValueError(f"{str(path)!r} is GGUF version {version}; versions 2 and 3 are supported.")
    pos, alignment = header.skip_metadata(24, n_kv, gguf.GGUF_DEFAULT_ALIGNMENT)
    entries = []
    for _ in range(n_tensors):
        name_end = header.skip_string(pos)
        name = bytes(header.blob[pos + 8 : name_end]).decode("utf-8")
        (n_dims,) = header.unpack("<I", name_end)
        dims = header.unpack(f"<{n_dims}Q", name_end + 4)
        qtype, offset = header.unpack("<IQ", name_end + 4 + 8 * n_dims)
        pos = name_end + 4 + 8 * n_dims + 12
        entries.append((name, tuple(reversed(dims)), qtype, offset))  # ggml lists the fastest axis first
    data_start = (pos + alignment - 1) // alignment * alignment
    return [placed(path, header.size, data_start, *entry) for entry in entries]


class Header:
    """Reads a GGUF file's header fields, each checked to lie inside the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blob = np.memmap(path, mode="r", dtype=np.uint8)
        self.view = self.blob.data  # the bytes, as a buffer struct reads
        self.size = int(self.blob.shape[0])

    def need(self, pos: int, n: int) -> None:
        """``n`` bytes from ``pos`` lie inside the file."""
        if pos + n > self.size:
            raise ValueError(f"{str(self.path)!r} is truncated: a GGUF header field at byte {pos} runs past its end.")

    def unpack(self, fmt: str, pos: int) -> tuple[Any, ...]:
        """The values of ``struct`` format ``fmt`` at ``pos``."""
        self.need(pos, struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.view, pos)

    def skip_string(self, pos: int) -> int:
        """Where the length-prefixed string at ``pos`` ends."""
        (length,) = self.unpack("<Q", pos)
        self.need(pos + 8, length)
        return pos + 8 + length

    def skip_metadata(self, pos: int, n_kv: int, alignment: int) -> tuple[int, int]:
        """Past ``n_kv`` metadata entries from ``pos`` (none parsed but ``general.alignment``): where they end, and
        the data's alignment (``alignment`` unless the file says)."""
        for _ in range(n_kv):
            key_end = self.skip_string(pos)
            key = bytes(self.blob[pos + 8 : key_end]).decode("utf-8", "replace")
            (vtype,) = self.unpack("<I", key_end)
            pos = key_end + 4
            if vtype == _STRING:
                pos = self.skip_string(pos)
            elif vtype == _ARRAY:
                pos = self.skip_array(pos, key)
            elif vtype in _WIDTH:
                if key == "general.alignment":
                    (alignment,) = self.unpack("<I", pos)
                pos += _WIDTH[vtype]
            else:
                raise ValueError(f"{str(self.path)!r}: metadata {key!r} has unknown value type {vtype}.")
        return pos, alignment

    def skip_array(self, pos: int, key: str) -> int:
        """Where the metadata array at ``pos`` (the value of ``key``) ends."""
        etype, count = self.unpack("<IQ", pos)
        pos += 12
        if etype == _STRING:
            for _ in range(count):
                pos = self.skip_string(pos)
        elif etype in _WIDTH:
            self.need(pos, count * _WIDTH[etype])
            pos += count * _WIDTH[etype]
        else:
            raise ValueError(f"{str(self.path)!r}: metadata {key!r} is an array of unknown type {etype}.")
        return pos


def placed(path: Path, size: int, data_start: int, name: str, shape: tuple[int, ...], qtype: int,
           offset: int) -> GgufTensor:  # fmt: skip
    """A tensor entry of the table with its bytes' place, checked to lie inside the file (``size`` bytes)."""
    import gguf

    try:
        block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    except (ValueError, KeyError) as err:
        raise ValueError(f"{str(path)!r}: tensor {name!r} has unknown ggml type {qtype}.") from err
    if shape[-1] % block:
        raise ValueError(f"{str(path)!r}: tensor {name!r} has {shape[-1]} columns, not a multiple of {block}.")
    nbytes = int(np.prod(shape[:-1], dtype=np.int64)) * shape[-1] // block * block_bytes
    start = data_start + offset
    if start + nbytes > size:
        raise ValueError(f"{str(path)!r}: tensor {name!r} lies past the end of the file (truncated download?).")
    return GgufTensor(name, shape, qtype, start, nbytes)


def gguf_config(path: Path) -> dict:
    """The transformers config dict a GGUF describes, read as transformers' own GGUF loader does."""
    from transformers.integrations import GGUF_CONFIG_MAPPING
    from transformers.integrations.gguf import read_gguf_metadata

    metadata, tensor_names = read_gguf_metadata(str(path))
    arch = metadata["general.architecture"]
    if arch not in ARCHITECTURES:
        raise ValueError(f"{str(path)!r} holds a {arch!r} model; this converter handles {sorted(ARCHITECTURES)}.")
    config: dict = {}
    for key, value in metadata.items():
        prefix, _, rest = key.partition(".")
        section: Any = GGUF_CONFIG_MAPPING.get(arch if prefix == arch else prefix, {})  # a dict of names
        renamed = section.get(rest)
        if renamed not in (None, -1):
            config[renamed] = value
    config["model_type"] = ARCHITECTURES[arch]
    config["tie_word_embeddings"] = "output.weight" not in tensor_names
    config.setdefault("vocab_size", metadata["tokenizer.ggml.tokens"])  # the reader gives a string array's length
    return config


def _dequantize_rows(blob: np.ndarray, t: GgufTensor, start_row: int, stop_row: int) -> np.ndarray:
    import gguf

    rows = int(np.prod(t.shape[:-1], dtype=np.int64))
    row_bytes = t.nbytes // rows
    raw = blob[t.start + start_row * row_bytes : t.start + stop_row * row_bytes]
    raw = raw.reshape(stop_row - start_row, row_bytes)
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t.qtype)).astype(np.float32, copy=False)


@contextlib.contextmanager
def _one_name_map() -> Iterator[None]:
    """transformers' ``get_gguf_hf_weights_map`` recurses over every module and rebuilds gguf's tensor name map
    in each call (710 times for Gemma 3 270M: a quarter of a conversion's CPU time); inside this block gguf
    builds each (architecture, layers) map once."""
    import gguf

    built = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(built)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = built


def convert_weights(path: Path, config_dict: dict, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of the file under its transformers name, in ``dtype``, dequantised block by block."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    arch = next(a for a, model_type in ARCHITECTURES.items() if model_type == config_dict["model_type"])
    with torch.device("meta"):  # only the parameter names are needed: nothing is allocated
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config_dict))
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=config_dict)
    with _one_name_map():
        names = get_gguf_hf_weights_map(skeleton, processor)
    tied = config_dict["tie_word_embeddings"]
    expected = {k: v for k, v in skeleton.state_dict().items() if not (tied and k == "lm_head.weight")}
    blob = np.memmap(path, mode="r", dtype=np.uint8)
    out: dict[str, torch.Tensor] = {}
    for t in tensor_table(path):
        if t.name not in names:
            logger.info("GGUF tensor %s has no transformers counterpart; skipped.", t.name)
            continue
        hf_name = names[t.name]
        rows = int(np.prod(t.shape[:-1], dtype=np.int64))
        target = torch.empty(rows, t.shape[-1], dtype=dtype)
        step = rows if any(part in t.name for part in _WHOLE) else _ROWS_PER_BLOCK
        for first in range(0, rows, step):
            last = min(rows, first + step)
            block = processor.process(weights=_dequantize_rows(blob, t, first, last), name=t.name).weights
            target[first:last] = torch.from_numpy(np.require(block, np.float32, ["C", "W"]))
        out[hf_name] = target.reshape(t.shape)
    missing = sorted(set(expected) - set(out))
    wrong = [k for k in out if k in expected and tuple(expected[k].shape) != tuple(out[k].shape)]
    if missing or wrong:
        raise ValueError(f"{str(path)!r} does not fill the model: missing {missing[:5]}, wrong shape {wrong[:5]}.")
    return out


def save_fast_tokenizer(gguf_path: Path, out: Path, model_type: str) -> None:
    """Build the tokenizer from the GGUF vocabulary once and save it so it loads with no conversion.

    The saved ``tokenizer_config.json`` names the generic fast class and lists the added tokens,
    so ``AutoTokenizer.from_pretrained(out)`` only parses ``tokenizer.json`` (in Rust).
    """
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name

    class_name = TOKENIZER_MAPPING_NAMES.get(model_type)  # llama has none: the file's own tokenizer model decides
    cls = tokenizer_class_from_name(class_name) if class_name is not None else AutoTokenizer
    if cls is None:
        raise ValueError(f"transformers has no tokenizer class for {model_type!r} (found {class_name!r}).")
    tok = cls.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tok.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only", "name_or_path"):
        cfg.pop(key, None)
    added = Tokenizer.from_file(str(out / "tokenizer.json")).get_added_tokens_decoder()
    cfg.update(
        tokenizer_class="TokenizersBackend",
        padding_side=tok.padding_side,
        added_tokens_decoder={str(i): t.__getstate__() for i, t in sorted(added.items())},
    )
    cfg_path.write_text(json.dumps(cfg, indent=1, ensure_ascii=False), encoding="utf-8")


ALIGNMENT = 64  # bytes: where oneDNN's fast CPU kernels want a weight to start
_ST_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64"}


def save_aligned(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write a safetensors file in which every tensor starts on a 64-byte boundary of the file.

    Memory-mapped weights then start on 64 bytes in memory too (the mapping is page-aligned). With
    ``safetensors.torch.save_file``'s 8-byte layout the embedded model's bfloat16 matrix products ran
    about 2x slower (8 x 64 tokens through the tied unembedding: 4.5 s against 1.9 s). The header is
    padded with spaces, as the format allows; tensors whose size is not a multiple of 64 bytes go last.
    """
    names = sorted(tensors, key=lambda n: (tensors[n].numel() * tensors[n].element_size()) % ALIGNMENT != 0)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % ALIGNMENT)
    with open(path, "wb") as handle:  # inside the caller's atomic folder
        handle.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            handle.write(tensors[name].contiguous().view(torch.uint8).reshape(-1).numpy().data)  # no copy


def convert_gguf(gguf_path: Path, out: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Write a transformers folder for a GGUF: ``config.json``, ``model.safetensors`` in ``dtype``, the tokenizer."""
    from transformers import AutoConfig, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config_dict = gguf_config(gguf_path)
    tensors = convert_weights(gguf_path, config_dict, dtype)
    save_aligned(tensors, out / "model.safetensors")
    del tensors  # before the tokenizer, whose Python objects would otherwise sit under the weights
    save_fast_tokenizer(gguf_path, out, config_dict["model_type"])
    config = AutoConfig.for_model(**config_dict)
    config.dtype = dtype
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
