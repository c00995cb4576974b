"""Storm's multilang protocol as data: the codecs (JSON messages each ended by a line ``end``, or MessagePack
objects back to back), the serializer a component's conf selects, and the messages the worker sends and reads
(handshake, tuples, heartbeats, commands, emits). Pure functions and small classes, no processes: the shell
executors in :mod:`worker.multilang` drive a subprocess with them.

    codec = codec_for({"topology.multilang.serializer": "org.apache.storm.multilang.MessagePackSerializer"})
    codec.encoder()(command("next"))      # b'\x81\xa7command\xa4next'
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgpack

from squall.api.tuple import Tuple
from squall.core.config.validation import ConfigError
from squall.core.system_ids import DEFAULT_STREAM, RESERVED_PREFIX, SHELL_HEARTBEAT_STREAM, SYSTEM_TASK
from squall.core.thrift import storm
from worker.layout import TopologyLayout

#: Storm's default ``topology.multilang.serializer``.
JSON_SERIALIZER = "org.apache.storm.multilang.JsonSerializer"
#: Storm's multilang log levels (0-4) → Python logging's.
LOG_LEVELS = {0: 5, 1: 10, 2: 20, 3: 30, 4: 40}


class MultilangError(RuntimeError):
    """A shell component's subprocess broke the protocol, stopped answering or exited."""


# -- codec ----------------------------------------------------------------------------------------


class Decoder(Protocol):
    def feed(self, data: bytes) -> list[Any]:
        """The whole messages ``data`` completes (a partial one is kept for the next call)."""


class JsonDecoder:
    """Storm's JSON framing: a JSON document, then a line ``end``; blank lines between messages are skipped.

    >>> JsonDecoder().feed(b'{"command": "sync"}\\nend\\n[1, 2]\\nend\\n{"comm')
    [{'command': 'sync'}, [1, 2]]
    """

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> list[Any]:
        buffer = self._rest + data if self._rest else data
        *texts, self._rest = buffer.replace(b"\nend\nend\n", b"\nend\n").split(b"\nend\n")
        if texts and texts[0].startswith(b"end\n"):  # an empty message first in the stream
            texts[0] = texts[0][4:]
        texts = [text for text in texts if text.strip()]
        if not texts:
            return []
        try:  # one parse for every message the read completed: a JSON array of them
            return json.loads(b"[" + b",".join(texts) + b"]")
        except ValueError:
            pass
        for text in texts:  # which one is not JSON (or held two values)
            try:
                json.loads(text)
            except ValueError as exc:
                raise MultilangError(
                    f"the subprocess wrote what is not a JSON message ({exc}): {text[:200]!r}"
                ) from None
        raise MultilangError(f"the subprocess wrote what is not one JSON message per 'end' line: {texts[:3]!r}")


class MsgpackDecoder:
    """MessagePack objects back to back, as pystorm's ``MsgpackSerializer`` writes them."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)

    def feed(self, data: bytes) -> list[Any]:
        self._unpacker.feed(data)
        try:
            return list(self._unpacker)
        except ValueError as exc:
            raise MultilangError(f"the subprocess wrote what is not MessagePack: {exc}") from None


class Codec:
    """One serializer: ``encoder()`` makes a function from message to bytes (one per executor: encoders keep
    state), ``decoder()`` a :class:`Decoder` (one per subprocess); ``encode`` is a shared encoder for tests."""

    def __init__(
        self, name: str, encoder: Callable[[], Callable[[Any], bytes]], decoder: Callable[[], Decoder]
    ) -> None:
        self.name = name
        self.encoder = encoder
        self.decoder = decoder
        self.encode = encoder()

    def __repr__(self) -> str:
        return f"Codec({self.name!r})"


def _json_encoder() -> Callable[[Any], bytes]:
    # What JSON cannot hold is sent as its text, as Storm's JsonSerializer does (toString).
    encode = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode

    def encode_json(message: Any) -> bytes:
        return (encode(message) + "\nend\n").encode()

    return encode_json


def _msgpack_encoder() -> Callable[[Any], bytes]:
    return msgpack.Packer(use_bin_type=True, default=str).pack


JSON = Codec("json", _json_encoder, JsonDecoder)
MSGPACK = Codec("msgpack", _msgpack_encoder, MsgpackDecoder)


def _script_serializer(script: str) -> str | None:
    """The serializer a streamparse_run script line asks for (``-s msgpack``, ``--serializer=json``), if any."""
    try:
        words = shlex.split(script)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word in ("-s", "--serializer") and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--serializer="):
            return word.split("=", 1)[1]
    return None


def codec_for(conf: Mapping[str, Any], script: str = "") -> Codec:
    """The codec of a shell component: ``topology.multilang.serializer`` (its component conf wins over the
    topology's), or what its script asks pystorm's ``streamparse_run`` for (``-s msgpack``) while the key keeps
    Storm's default. A conflict between the two is refused: the subprocess would never understand the worker.

        codec_for({"topology.multilang.serializer": "org.apache.storm.multilang.MessagePackSerializer"})  # MSGPACK
        codec_for({}, "-s msgpack wordcount.bolts.Count")                                                  # MSGPACK
    """
    name = conf.get("topology.multilang.serializer") or JSON_SERIALIZER
    simple = str(name).rsplit(".", 1)[-1].lower()
    if simple in ("json", "jsonserializer"):
        codec = JSON
    elif "msgpack" in simple or "messagepack" in simple:
        codec = MSGPACK
    else:
        raise ConfigError(
            f"topology.multilang.serializer {name!r} is not a serializer Squall speaks: use "
            f"{JSON_SERIALIZER!r} (JSON, Storm's default) or a MessagePack one "
            "(e.g. 'org.apache.storm.multilang.MessagePackSerializer', or 'msgpack')"
        )
    asked = _script_serializer(script)
    if asked is None or asked == codec.name:
        return codec
    explicit = conf.get("topology.multilang.serializer") not in (None, JSON_SERIALIZER)
    if asked == "msgpack" and not explicit:
        return MSGPACK
    raise ConfigError(
        f"topology.multilang.serializer {name!r} speaks {codec.name} but the script asks for "
        f"{asked} ({script!r}): make them agree"
    )


# -- messages -------------------------------------------------------------------------------------


def grouping_json(grouping: storm.Grouping) -> dict[str, Any]:
    """A grouping as Storm's context shows it: ``{"type": "FIELDS", "fields": [...]}``, ``{"type": "SHUFFLE"}``."""
    for name in (
        "fields",
        "shuffle",
        "all",
        "none",
        "direct",
        "custom_object",
        "custom_serialized",
        "local_or_shuffle",
        "partial_key",
    ):
        value = getattr(grouping, name, None)
        if value is not None:
            if name in ("fields", "partial_key"):
                return {"type": name.upper(), "fields": list(value)}
            return {"type": name.upper()}
    return {"type": "NONE"}


def context_for(layout: TopologyLayout, component: str, task: int) -> dict[str, Any]:
    """The ``context`` of the handshake, with the keys Storm (0.10+) sends: ``taskid``, ``componentid``,
    ``task->component``, the component's ``streams`` and ``stream->outputfields``, whom it sends to
    (``stream->target->grouping``) and what it reads (``source->stream->grouping`` / ``->fields``)."""
    spec = layout.components[component]
    streams = {sid: list(info.fields) for sid, info in spec.streams.items() if not sid.startswith(RESERVED_PREFIX)}
    targets: dict[str, dict[str, Any]] = {}
    sources: dict[str, dict[str, Any]] = {}
    fields: dict[str, dict[str, list[str]]] = {}
    for (source, stream), subscriptions in layout.subscribers.items():
        if stream.startswith(RESERVED_PREFIX) or source.startswith(RESERVED_PREFIX):
            continue
        for sub in subscriptions:
            if source == component:
                targets.setdefault(stream, {})[sub.component] = grouping_json(sub.grouping)
            if sub.component == component:
                sources.setdefault(source, {})[stream] = grouping_json(sub.grouping)
                fields.setdefault(source, {})[stream] = list(layout.fields(source, stream) or ())
    return {
        "taskid": task,
        "componentid": component,
        "task->component": {str(t): c for t, c in sorted(layout.task_component.items())},
        "streams": sorted(streams),
        "stream->outputfields": streams,
        "stream->target->grouping": targets,
        "source->stream->grouping": sources,
        "source->stream->fields": fields,
    }


def handshake(conf: Mapping[str, Any], context: Mapping[str, Any], pid_dir: str) -> dict[str, Any]:
    """The first message to a subprocess."""
    return {"conf": dict(conf), "pidDir": pid_dir, "context": dict(context)}


def tuple_message(tuple_id: str, tup: Tuple) -> dict[str, Any]:
    """An input tuple for a shell bolt (the id is a string: languages without 64-bit integers can keep it)."""
    return {"id": tuple_id, "comp": tup.component, "stream": tup.stream, "task": tup.task, "tuple": list(tup.values)}


def heartbeat_message(tuple_id: str) -> dict[str, Any]:
    """Storm's heartbeat pseudo-tuple: the child answers ``{"command": "sync"}``."""
    return {"id": tuple_id, "comp": None, "stream": SHELL_HEARTBEAT_STREAM, "task": SYSTEM_TASK, "tuple": []}


def command(name: str, msg_id: Any = None) -> dict[str, Any]:
    """A spout command: ``next``, ``ack``/``fail`` (with the message id), ``activate``, ``deactivate``."""
    return {"command": name} if msg_id is None else {"command": name, "id": msg_id}


def emit_target(message: Mapping[str, Any]) -> tuple[tuple[Any, ...], str, int | None, bool]:
    """(values, stream, direct task or None, whether task ids are wanted) of an ``emit`` message."""
    values = message.get("tuple")
    if not isinstance(values, (list, tuple)):
        raise MultilangError(f"emit without a 'tuple' list: {message!r}")
    task = message.get("task") or None  # Storm: 0 or absent means not direct
    wanted = message.get("need_task_ids", True) is not False and task is None
    return tuple(values), message.get("stream") or DEFAULT_STREAM, task, wanted
