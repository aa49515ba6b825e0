"""``fluxes exec``'s exchange with the exec workers: the ``command`` request to each
rank's stream, and the ranks' answers on one reply stream per command."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fluxes import messages as proto
from fluxes.store.keys import Keys


def send_command(client: Any, keys: Keys, ranks: Iterable[int], msg: proto.Command) -> None:
    """Post ``msg`` to every rank's request stream in one round trip."""
    pipe = client.pipeline(transaction=False)
    for rank in ranks:
        pipe.xadd(keys.exec_rank(rank), proto.encode_entry([msg]))
    pipe.execute()


def read_answers(client: Any, keys: Keys, token: str, after: str, block_s: float
                 ) -> list[tuple[str, dict[bytes, bytes]]]:
    """The answers to command ``token`` after stream id ``after``, waiting up to
    ``block_s`` seconds for the first: (entry id, fields) each."""
    got = client.xread({keys.exec_reply(token): after}, block=int(block_s * 1000) or 1)
    return [(entry_id.decode() if isinstance(entry_id, bytes) else entry_id, fields)
            for _key, entries in got or [] for entry_id, fields in entries]


def drop_answers(client: Any, keys: Keys, token: str) -> None:
    """Delete the command's reply stream (it also expires on its own)."""
    client.delete(keys.exec_reply(token))
