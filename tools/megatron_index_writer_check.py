#!/usr/bin/env python3
"""Write Megatron indexed datasets (.bin/.idx) from a dump of token ids, with Megatron's own code.

Used by tests/integration/megatron_bytes.sh to check that tools/preprocess_data writes the same
bytes as Megatron-LM's tools/preprocess_data.py for the same tokens.

    megatron_index_writer_check.py --ids DUMP.jsonl --output-prefix PREFIX --vocab-size 50257

DUMP.jsonl has one line per document and key, {"key": K, "ids": [...], "lengths": [...]}, in
input order (what `preprocess_data --dump-ids` writes). For every key K this writes
PREFIX_K_document.bin/.idx (PREFIX_K_sentence with --level sentence, Megatron's name under --split-sentences).

_IndexWriter, IndexedDatasetBuilder (add_document / finalize) and DType below are transcribed
from NVIDIA/Megatron-LM, megatron/core/datasets/indexed_dataset.py at commit
00caa53af30912914981c86f39db123961678bbd. Only what cannot run here was left out: torch
(add_document received a list from tools/preprocess_data.py and only calls numpy.array on it),
the multi-storage client (plain open() is the default path), the multimodal sequence modes
(preprocess_data never sets them) and the readers. The driver at the bottom mirrors
Partition.process_json_file in tools/preprocess_data.py: one builder per key, dtype from
DType.optimal_dtype(tokenizer.vocab_size), add_document(doc[key], sentence_lens[key]) per line.
"""

import argparse
import json
import struct
from enum import Enum
from typing import List, Optional, Type

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"


class DType(Enum):
    uint8 = 1
    int8 = 2
    int16 = 3
    int32 = 4
    int64 = 5
    float64 = 6
    float32 = 7
    uint16 = 8

    @classmethod
    def code_from_dtype(cls, value: Type[numpy.number]) -> int:
        return cls[value.__name__].value

    @classmethod
    def dtype_from_code(cls, value: int) -> Type[numpy.number]:
        return getattr(numpy, cls(value).name)

    @staticmethod
    def size(key) -> int:
        if isinstance(key, int):
            return DType.dtype_from_code(key)().itemsize
        elif numpy.number in key.__mro__:
            return key().itemsize
        else:
            raise ValueError

    @staticmethod
    def optimal_dtype(cardinality: Optional[int]) -> Type[numpy.number]:
        if cardinality is not None and cardinality < 65500:
            return numpy.uint16
        else:
            return numpy.int32


class _IndexWriter(object):
    def __init__(self, idx_path: str, dtype: Type[numpy.number]) -> None:
        self.idx_path = idx_path
        self.dtype = dtype

    def __enter__(self) -> "_IndexWriter":
        self.idx_writer = open(self.idx_path, "wb")
        # fixed, vestigial practice
        self.idx_writer.write(_INDEX_HEADER)
        # fixed, vestigial practice
        self.idx_writer.write(struct.pack("<Q", 1))
        # the numeric code for the dtype
        self.idx_writer.write(struct.pack("<B", DType.code_from_dtype(self.dtype)))
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> Optional[bool]:
        self.idx_writer.close()
        return None

    def write(self, sequence_lengths, sequence_modes, document_indices) -> None:
        sequence_pointers = self._sequence_pointers(sequence_lengths)

        # the number of sequences in the dataset
        sequence_count = len(sequence_lengths)
        self.idx_writer.write(struct.pack("<Q", sequence_count))

        # the number of documents in the dataset
        document_count = len(document_indices)
        self.idx_writer.write(struct.pack("<Q", document_count))

        # the number of tokens per sequence
        self.idx_writer.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))

        # the byte offsets for all sequences
        self.idx_writer.write(numpy.array(sequence_pointers, dtype=numpy.int64).tobytes(order="C"))

        # the sequence indices marking the end of each document
        self.idx_writer.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))

        # the mode per sequence
        if sequence_modes is not None:
            self.idx_writer.write(numpy.array(sequence_modes, dtype=numpy.int8).tobytes(order="C"))

    def _sequence_pointers(self, sequence_lengths) -> List[int]:
        itemsize = numpy.int64(DType.size(self.dtype))
        curr_ptr = numpy.int64(0)
        list_ptr = []
        for length in sequence_lengths:
            list_ptr.append(curr_ptr.item())
            curr_ptr += length * itemsize
        return list_ptr


class IndexedDatasetBuilder(object):
    def __init__(self, bin_path: str, dtype: Type[numpy.number] = numpy.int32, multimodal: bool = False) -> None:
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.multimodal = multimodal

        self.sequence_lengths = []
        self.document_indices = [0]
        self.sequence_modes = [] if self.multimodal else None

    def add_document(self, tensor, lengths: List[int], modes: Optional[List[int]] = None) -> None:
        np_array = numpy.array(tensor, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))
        if self.multimodal:
            self.sequence_modes.extend(modes if modes is not None else [0] * lengths)

    def finalize(self, idx_path: str) -> None:
        self.data_file.close()
        with _IndexWriter(idx_path, self.dtype) as writer:
            writer.write(self.sequence_lengths, self.sequence_modes, self.document_indices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ids", required=True, help="JSONL dump from preprocess_data --dump-ids")
    parser.add_argument("--output-prefix", required=True)
    parser.add_argument("--vocab-size", type=int, required=True, help="tokenizer.vocab_size (50257 for GPT-2)")
    parser.add_argument("--level", default="document", choices=["document", "sentence"],
                        help="Megatron's output level: sentence with --split-sentences")
    args = parser.parse_args()

    builders = {}
    with open(args.ids, "r", encoding="utf-8") as fin:
        for line in fin:
            doc = json.loads(line)
            key = doc["key"]
            if key not in builders:
                builders[key] = IndexedDatasetBuilder(
                    "{}_{}_{}.bin".format(args.output_prefix, key, args.level),
                    dtype=DType.optimal_dtype(args.vocab_size),
                )
            builders[key].add_document(doc["ids"], doc["lengths"])
    for key, builder in builders.items():
        builder.finalize("{}_{}_{}.idx".format(args.output_prefix, key, args.level))
        print("wrote {}_{}_{}.bin/.idx".format(args.output_prefix, key, args.level))


if __name__ == "__main__":
    main()
