"""The integration scripts' shared Python, beside lib.sh (a script's Python imports it with
PYTHONPATH="$SRC/tests/integration"): Megatron's indexed dataset (megatron/core/datasets/indexed_dataset.py,
MMIDIDX version 1), read and written.
  read(prefix, code=8)       -> (sequences, doc_idx): every sequence's tokens as a list of ints, and the document
                                index; the .idx must have DType code `code` (8 uint16, 1 uint8, 4 int32) and no
                                trailing bytes, and the sequences must cover the .bin exactly
  documents(prefix, code=8)  -> each document's tokens (its sequences joined); doc_idx must run from 0 to the last sequence
  write(prefix, docs)        one sequence a document, uint16 tokens (DType code 8: vocabulary < 65500, as Megatron picks)
And state_flat(state): a nested (Megatron) state dict's leaves in order as (dotted name, value) pairs.
"""
import array
import struct
import sys

TYPECODES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}  # Megatron's DType codes of integer tokens


def read(prefix, code=8):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx: bad header"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1 and idx[17] == code, f"{prefix}.idx: version {version}, DType code {idx[17]}, expected 1 and {code}"
    seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
    off = 34
    lengths = struct.unpack_from(f"<{seq_count}i", idx, off); off += 4 * seq_count
    pointers = struct.unpack_from(f"<{seq_count}q", idx, off); off += 8 * seq_count
    doc_idx = struct.unpack_from(f"<{doc_count}q", idx, off); off += 8 * doc_count
    assert off == len(idx), f"{prefix}.idx: {len(idx) - off} trailing bytes"
    data = array.array(TYPECODES[code])
    data.frombytes(open(prefix + ".bin", "rb").read())
    if sys.byteorder != "little":
        data.byteswap()
    size = data.itemsize
    sequences = [data[p // size:p // size + n].tolist() for p, n in zip(pointers, lengths)]
    assert sum(map(len, sequences)) == len(data), f"{prefix}: sequences of {sum(lengths)} tokens, .bin of {len(data)}"
    return sequences, list(doc_idx)


def documents(prefix, code=8):
    sequences, doc_idx = read(prefix, code)
    assert doc_idx and doc_idx[0] == 0 and doc_idx[-1] == len(sequences), f"{prefix}.idx: document index {doc_idx[:3]}..."
    return [sum(sequences[doc_idx[d]:doc_idx[d + 1]], []) for d in range(len(doc_idx) - 1)]


def write(prefix, docs):
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(struct.pack("<%dH" % len(d), *d))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1))
        f.write(struct.pack("<%di" % len(docs), *[len(d) for d in docs]))
        ptr, ptrs = 0, []
        for d in docs:
            ptrs.append(ptr)
            ptr += 2 * len(d)
        f.write(struct.pack("<%dq" % len(docs), *ptrs))
        f.write(struct.pack("<%dq" % (len(docs) + 1), *range(len(docs) + 1)))


def state_flat(state, prefix=""):
    """A nested state dict's leaves in order, under dotted names (a Megatron model's named_parameters order)."""
    out = []
    for k, v in state.items():
        out += state_flat(v, prefix + k + ".") if isinstance(v, dict) else [(prefix + k, v)]
    return out
