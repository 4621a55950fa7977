"""gzip (RFC 1952) in pure Python whose output depends on nothing but its input.

Why not `gzip.compress`: its bytes come from whatever zlib the interpreter links (zlib, zlib-ng, a patched
zlib with other match heuristics), and a gateway's user data that differs by one byte replaces the gateway.
Two operators running `pulumi up` on different machines must produce byte-identical user data. This encoder
is LZ77 with a hash chain of a fixed depth and one block of DEFLATE's fixed Huffman codes (RFC 1951 3.2.6):
plain, deterministic by construction, and any gunzip (cloud-init uses Python's) reads it. Decompression
is zlib's: tests check `gzip.decompress(compress(x)) == x`.
"""

from __future__ import annotations

import struct
import zlib

WINDOW = 32768
MIN_MATCH, MAX_MATCH = 3, 258
CHAIN = 128  # candidates looked at per position: the speed/ratio trade-off, part of the output format

# (base length, extra bits) for length codes 257..285 and (base distance, extra bits) for distance codes 0..29
_LENGTHS = [
    (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0), (9, 0), (10, 0), (11, 1), (13, 1), (15, 1), (17, 1),
    (19, 2), (23, 2), (27, 2), (31, 2), (35, 3), (43, 3), (51, 3), (59, 3), (67, 4), (83, 4), (99, 4),
    (115, 4), (131, 5), (163, 5), (195, 5), (227, 5), (258, 0),
]  # fmt: skip
_DISTANCES = [
    (1, 0), (2, 0), (3, 0), (4, 0), (5, 1), (7, 1), (9, 2), (13, 2), (17, 3), (25, 3), (33, 4), (49, 4),
    (65, 5), (97, 5), (129, 6), (193, 6), (257, 7), (385, 7), (513, 8), (769, 8), (1025, 9), (1537, 9),
    (2049, 10), (3073, 10), (4097, 11), (6145, 11), (8193, 12), (12289, 12), (16385, 13), (24577, 13),
]  # fmt: skip


def _reverse(code: int, bits: int) -> int:
    out = 0
    for _ in range(bits):
        out, code = (out << 1) | (code & 1), code >> 1
    return out


def _fixed_literal_code(symbol: int) -> tuple[int, int]:
    """(code, bit count) of a literal/length symbol in the fixed Huffman code, bit-reversed for LSB-first output."""
    if symbol <= 143:
        code, bits = 0x30 + symbol, 8
    elif symbol <= 255:
        code, bits = 0x190 + symbol - 144, 9
    elif symbol <= 279:
        code, bits = symbol - 256, 7
    else:
        code, bits = 0xC0 + symbol - 280, 8
    return _reverse(code, bits), bits


_LITERAL = [_fixed_literal_code(s) for s in range(288)]
_DISTANCE = [(_reverse(d, 5), 5) for d in range(30)]


def _length_symbol(length: int) -> tuple[int, int, int]:
    for i in range(len(_LENGTHS) - 1, -1, -1):
        base, extra = _LENGTHS[i]
        if length >= base:
            return 257 + i, length - base, extra
    raise ValueError(length)


def _distance_symbol(distance: int) -> tuple[int, int, int]:
    for i in range(len(_DISTANCES) - 1, -1, -1):
        base, extra = _DISTANCES[i]
        if distance >= base:
            return i, distance - base, extra
    raise ValueError(distance)


class _Bits:
    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.count = 0

    def write(self, value: int, bits: int) -> None:
        self.acc |= value << self.count
        self.count += bits
        while self.count >= 8:
            self.out.append(self.acc & 0xFF)
            self.acc >>= 8
            self.count -= 8

    def flush(self) -> bytes:
        if self.count:
            self.out.append(self.acc & 0xFF)
            self.acc = self.count = 0
        return bytes(self.out)


def _longest_match(data: bytes, pos: int, candidates: list[int]) -> tuple[int, int]:
    best_len, best_dist = 0, 0
    limit = min(MAX_MATCH, len(data) - pos)
    for start in reversed(candidates[-CHAIN:]):  # nearest first: on a tie the shorter distance wins
        distance = pos - start
        if distance > WINDOW:
            break
        if best_len and (best_len >= limit or data[start + best_len] != data[pos + best_len]):
            continue  # cannot beat the best match so far (zlib's first test)
        length = 0
        while length < limit and data[start + length] == data[pos + length]:
            length += 1
        if length > best_len:
            best_len, best_dist = length, distance
            if length == limit:
                break
    return best_len, best_dist


def deflate(data: bytes) -> bytes:
    """A raw DEFLATE stream: one final block with the fixed Huffman codes."""
    bits = _Bits()
    bits.write(1, 1)  # BFINAL
    bits.write(1, 2)  # BTYPE 01: fixed Huffman codes
    chains: dict[bytes, list[int]] = {}
    pos = 0
    while pos < len(data):
        key = data[pos : pos + MIN_MATCH]
        candidates = chains.setdefault(key, []) if len(key) == MIN_MATCH else []
        length, distance = _longest_match(data, pos, candidates) if candidates else (0, 0)
        if length >= MIN_MATCH:
            symbol, extra_value, extra_bits = _length_symbol(length)
            bits.write(*_LITERAL[symbol])
            bits.write(extra_value, extra_bits)
            dsym, dextra_value, dextra_bits = _distance_symbol(distance)
            bits.write(*_DISTANCE[dsym])
            bits.write(dextra_value, dextra_bits)
            for p in range(pos, pos + length):
                k = data[p : p + MIN_MATCH]
                if len(k) == MIN_MATCH:
                    chains.setdefault(k, []).append(p)
            pos += length
        else:
            bits.write(*_LITERAL[data[pos]])
            if len(key) == MIN_MATCH:
                candidates.append(pos)
            pos += 1
    bits.write(*_LITERAL[256])  # end of block
    return bits.flush()


def gzip_compress(data: bytes) -> bytes:
    """A gzip member with no name and mtime 0 (RFC 1952): the same bytes for the same input, everywhere."""
    header = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff"  # no flags, mtime 0, XFL 0, OS unknown
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return header + deflate(data) + trailer
