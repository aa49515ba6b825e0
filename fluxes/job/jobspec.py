"""``JobspecV1``: a mutable RFC 14 jobspec with flux's Python methods.

flux scripts build a jobspec, then set ``cwd``, ``environment``,
``duration``, the output files and attributes on it before submitting; our
own :class:`fluxes.formats.jobspec.Jobspec` is immutable and validated, so
this class keeps the document as a dict and validates it when it is
submitted (or on :meth:`validate`), raising ``ValueError`` as flux does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import IO, Any

import orjson


def _parse_duration(value: Any) -> float:
    """Seconds from a number or an RFC 23 string (``"1m"``)."""
    from fluxes.formats.fsd import parse_duration

    if isinstance(value, bool):
        raise ValueError(f"duration: expected seconds or an FSD string, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_duration(value)
    else:
        raise ValueError(f"duration: expected seconds or an FSD string, got {value!r}")
    if seconds < 0:
        raise ValueError(f"duration: must be >= 0, got {value!r}")
    return seconds


class Jobspec:
    """A jobspec document with flux's accessors (base of :class:`JobspecV1`)."""

    def __init__(self, resources: Sequence[Any], tasks: Sequence[Any],
                 attributes: Mapping[str, Any] | None = None, version: int = 1) -> None:
        """A jobspec from its parts (as flux's ``Jobspec(resources, tasks, ...)``)."""
        self.jobspec: dict[str, Any] = {
            "resources": copy.deepcopy(list(resources)),
            "tasks": copy.deepcopy(list(tasks)),
            "attributes": copy.deepcopy(dict(attributes or {"system": {}})),
            "version": version,
        }
        self.jobspec["attributes"].setdefault("system", {})

    # -- constructors ------------------------------------------------------

    @classmethod
    def _of(cls, doc: Mapping[str, Any]) -> Any:
        if not isinstance(doc, Mapping):
            raise ValueError("a jobspec is a mapping")
        for key in ("resources", "tasks"):
            if key not in doc:
                raise ValueError(f"jobspec: missing {key!r}")
        return cls(doc["resources"], doc["tasks"], doc.get("attributes") or {"system": {}},
                   doc.get("version", 1))

    @classmethod
    def from_yaml_stream(cls, stream: str | bytes | IO[Any]) -> Any:
        """A jobspec from YAML (or JSON) text or an open file."""
        from fluxes.formats.jobspec import Jobspec as Checked

        text = stream if isinstance(stream, str | bytes) else stream.read()
        return cls._of(Checked.from_yaml(text).to_dict())

    @classmethod
    def from_yaml_file(cls, filename: str) -> Any:
        """A jobspec from a YAML (or JSON) file."""
        with open(filename, "rb") as f:
            return cls.from_yaml_stream(f.read())

    # -- flux's accessors --------------------------------------------------

    @property
    def resources(self) -> list[Any]:
        """The resources section."""
        return list(self.jobspec["resources"])

    @property
    def tasks(self) -> list[Any]:
        """The tasks section."""
        return list(self.jobspec["tasks"])

    @property
    def attributes(self) -> dict[str, Any]:
        """The attributes section (the live dict)."""
        attrs: dict[str, Any] = self.jobspec["attributes"]
        return attrs

    @property
    def version(self) -> int:
        """The jobspec version (1)."""
        return int(self.jobspec["version"])

    def _system(self) -> dict[str, Any]:
        system: dict[str, Any] = self.attributes.setdefault("system", {})
        return system

    def setattr(self, key: str, val: Any) -> None:
        """Set an attribute by dotted path; a path not under ``system.``/``user.``
        (or ``attributes.``) goes under ``system.`` as in flux."""
        if key.startswith("attributes."):
            key = key[len("attributes."):]
        if not key.startswith(("system.", "user.")):
            key = "system." + key
        node = self.attributes
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: a value that is not a table is in the way")
        node[parts[-1]] = val

    def getattr(self, key: str) -> Any:
        """An attribute by dotted path (``system.`` implied); KeyError when unset."""
        if key.startswith("attributes."):
            key = key[len("attributes."):]
        if not key.startswith(("system.", "user.")):
            key = "system." + key
        node: Any = self.attributes
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(key)
            node = node[part]
        return node

    def setattr_shell_option(self, key: str, val: Any) -> None:
        """Set ``system.shell.options.<key>``."""
        self.setattr("system.shell.options." + key, val)

    @property
    def duration(self) -> float:
        """The time limit in seconds (0: none); set from seconds or an FSD string."""
        value = self._system().get("duration", 0)
        return float(value) if isinstance(value, int | float) else 0.0

    @duration.setter
    def duration(self, value: Any) -> None:
        self._system()["duration"] = _parse_duration(value)

    @property
    def cwd(self) -> str | None:
        """The working directory."""
        value = self._system().get("cwd")
        return value if isinstance(value, str) else None

    @cwd.setter
    def cwd(self, value: str) -> None:
        if not isinstance(value, str):
            raise ValueError("cwd must be a string")
        self._system()["cwd"] = value

    @property
    def environment(self) -> dict[str, Any] | None:
        """The job's environment."""
        value = self._system().get("environment")
        return value if isinstance(value, dict) else None

    @environment.setter
    def environment(self, value: Mapping[str, Any]) -> None:
        if not isinstance(value, Mapping):
            raise ValueError("environment must be a mapping")
        self._system()["environment"] = dict(value)

    @property
    def queue(self) -> str | None:
        """The queue."""
        value = self._system().get("queue")
        return value if isinstance(value, str) else None

    @queue.setter
    def queue(self, value: str) -> None:
        if not isinstance(value, str):
            raise ValueError("queue must be a string")
        self._system()["queue"] = value

    def _io(self, stream: str) -> str | None:
        try:
            value = self.getattr(f"system.shell.options.{_IO[stream]}.{stream}.path")
        except KeyError:
            return None
        return value if isinstance(value, str) else None

    def _set_io(self, stream: str, path: str) -> None:
        if not isinstance(path, str):
            raise ValueError(f"{stream} must be a path")
        self.setattr(f"system.shell.options.{_IO[stream]}.{stream}.type", "file")
        self.setattr(f"system.shell.options.{_IO[stream]}.{stream}.path", path)

    @property
    def stdout(self) -> str | None:
        """The file the tasks' standard output goes to (``{{id}}`` templates)."""
        return self._io("stdout")

    @stdout.setter
    def stdout(self, path: str) -> None:
        self._set_io("stdout", path)

    @property
    def stderr(self) -> str | None:
        """The file the tasks' standard error goes to."""
        return self._io("stderr")

    @stderr.setter
    def stderr(self, path: str) -> None:
        self._set_io("stderr", path)

    @property
    def stdin(self) -> str | None:
        """The file the tasks read as standard input."""
        return self._io("stdin")

    @stdin.setter
    def stdin(self, path: str) -> None:
        self._set_io("stdin", path)

    def dumps(self, **kwargs: Any) -> str:
        """The jobspec as JSON text (``kwargs`` are accepted for flux's signature)."""
        return orjson.dumps(self.jobspec).decode()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the problem when the jobspec is not valid."""
        self.checked()

    def checked(self) -> Any:
        """The validated :class:`fluxes.formats.jobspec.Jobspec` (``ValueError`` if not)."""
        from fluxes.formats.jobspec import Jobspec as Checked

        # a workflow submits one jobspec many times: validate each content once
        text = orjson.dumps(self.jobspec)
        cached = self.__dict__.get("_checked")
        if cached is not None and cached[0] == text:
            return cached[1]
        checked = Checked.from_dict(self.jobspec)
        self.__dict__["_checked"] = (text, checked)
        return checked

    def _submitted(self) -> tuple[dict[str, Any], int | None]:
        """The validated document as a submission carries it, and its urgency: one
        copy per content, shared by every submission of it (a workflow submits one
        jobspec many times; the submit path only encodes the document)."""
        checked = self.checked()
        cached = self.__dict__.get("_submitted_doc")
        if cached is not None and cached[0] is checked:
            return cached[1], cached[2]
        doc = checked.to_dict()
        self.__dict__["_submitted_doc"] = (checked, doc, checked.urgency)
        return doc, checked.urgency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Jobspec) and self.jobspec == other.jobspec

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dumps()})"


#: the shell option holding each standard stream
_IO = {"stdout": "output", "stderr": "output", "stdin": "input"}


class JobspecV1(Jobspec):
    """A version 1 jobspec (flux's ``JobspecV1``)."""

    @classmethod
    def from_command(cls, command: Sequence[str], num_tasks: int = 1, cores_per_task: int = 1,
                     gpus_per_task: int | None = None, num_nodes: int | None = None,
                     exclusive: bool = False, duration: Any = None,
                     environment: Mapping[str, Any] | None = None, cwd: str | None = None,
                     name: str | None = None, output: str | None = None,
                     error: str | None = None, queue: str | None = None,
                     **_ignored: Any) -> JobspecV1:
        """``command`` as ``num_tasks`` tasks of ``cores_per_task`` cores (and
        ``gpus_per_task`` GPUs), on ``num_nodes`` nodes if given: flux's shape.
        Bad counts raise ``ValueError``."""
        from fluxes.formats.jobspec import Jobspec as Checked

        if isinstance(command, str) or not command:
            raise ValueError("command must be a non-empty list of strings")
        built = Checked.from_command(
            list(command), nnodes=num_nodes, ntasks=num_tasks, cores_per_task=cores_per_task,
            gpus_per_task=gpus_per_task, exclusive=exclusive,
            duration=0.0 if duration is None else _parse_duration(duration),
            queue=queue, name=name, cwd=cwd,
            environment=None if environment is None else dict(environment),
            output=output, error=error)
        spec: JobspecV1 = cls._of(built.to_dict())
        return spec

    @classmethod
    def from_batch_command(cls, script: str, jobname: str, args: Sequence[str] | None = None,
                           num_slots: int = 1, cores_per_slot: int = 1,
                           gpus_per_slot: int | None = None, num_nodes: int | None = None,
                           exclusive: bool = False, duration: Any = None,
                           **_ignored: Any) -> JobspecV1:
        """A batch job: ``script`` (its text, starting with ``#!``) run with ``args``
        by a child instance on the allocation, as ``fluxes batch`` does."""
        from fluxes.cli.cmd_batch import _options_parser, allocation_jobspec

        if not isinstance(script, str) or not script.startswith("#!"):
            raise ValueError("script must be the text of a script starting with #!")
        words = ["-n", str(num_slots), "-c", str(cores_per_slot)]
        if num_nodes is not None:
            words += ["-N", str(num_nodes)]
        if gpus_per_slot:
            words += ["-g", str(gpus_per_slot)]
        if exclusive:
            words.append("-x")
        try:
            options = _options_parser().parse_args(words)
        except SystemExit:
            raise ValueError(f"bad batch job shape: {' '.join(words)}") from None
        options.job_name = jobname
        options.time_limit = None if duration is None else _parse_duration(duration)
        built = allocation_jobspec(options, [str(a) for a in args or []], script)
        spec: JobspecV1 = cls._of(built.to_dict())
        return spec
