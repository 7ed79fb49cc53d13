"""A tokenizer over an explicit list of byte pieces (greedy longest match), for tests and the
tiny cross-vocabulary pair: two vocabularies over the same text built in memory, no download.
"""

from __future__ import annotations

from collections.abc import Sequence

from multispin.models.vocab_map import TokenTable


class PieceTokenizer:
    """Ids 0..len(specials)-1 are special tokens, then one id per piece, in the order given.

    Encoding takes the longest piece that matches at each position; a byte no piece starts with
    is skipped (give every single byte as a piece for a lossless tokenizer)."""

    def __init__(self, pieces: Sequence[bytes | str], specials: Sequence[str] = (), eos: str | None = None):
        self.specials = list(specials)
        self.pieces = [p.encode() if isinstance(p, str) else bytes(p) for p in pieces]
        if len(set(self.pieces)) != len(self.pieces) or b"" in self.pieces:
            raise ValueError("pieces: must be distinct and non-empty")
        self._ids = {p: len(self.specials) + i for i, p in enumerate(self.pieces)}
        self._longest = max(len(p) for p in self.pieces)
        self.eos_token_id = self.specials.index(eos) if eos is not None else None

    def __len__(self) -> int:
        return len(self.specials) + len(self.pieces)

    @property
    def vocab_size(self) -> int:
        return len(self)

    def piece(self, i: int) -> bytes | None:
        j = int(i) - len(self.specials)
        return self.pieces[j] if 0 <= j < len(self.pieces) else None

    def encode_bytes(self, data: bytes) -> list[int]:
        out, pos = [], 0
        while pos < len(data):
            for n in range(min(self._longest, len(data) - pos), 0, -1):
                i = self._ids.get(data[pos : pos + n])
                if i is not None:
                    out.append(i)
                    pos += n
                    break
            else:
                pos += 1
        return out

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.encode_bytes(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        parts = []
        for i in ids:
            piece = self.piece(i)
            if piece is not None:
                parts.append(piece)
            elif not skip_special_tokens and 0 <= int(i) < len(self.specials):
                parts.append(self.specials[int(i)].encode())
        return b"".join(parts).decode("utf-8", errors="replace")

    def token_table(self) -> TokenTable:
        return TokenTable(
            tuple(self.piece(i) for i in range(len(self))), {i: s for i, s in enumerate(self.specials)}, self.encode
        )
