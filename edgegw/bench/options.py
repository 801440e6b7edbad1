"""What one `edgegw bench` run was asked to do (the parsed command line)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgegw.bench.llm import LlmSpec
from edgegw.mock import MockConfig

DEFAULT_CONNECTIONS = 32  # closed loop (bench/README.md's throughput runs use 32)
DEFAULT_OPEN_LOOP_CONNECTIONS = 256  # open loop: the most that may be opened


@dataclass(frozen=True, slots=True)
class BenchOptions:
    target: str | None = None
    direct: bool = False
    mock: MockConfig = MockConfig()  # noqa: RUF009 (frozen)
    mock_port: int = 0
    model: str = "openai/mock"
    stream: bool = True
    connections: int | None = None  # None: DEFAULT_CONNECTIONS, or the open-loop default cap
    rate: float | None = None
    duration_s: float = 10.0
    warmup_s: float = 1.0
    max_requests: int = 1_000_000
    timeout_s: float = 30.0
    json_path: str | None = None
    compare: dict[str, Any] | None = None  # the earlier run, already read
    compare_path: str | None = None
    progress: bool | None = None  # None: when stderr is a terminal
    api_key: str | None = None
    scenario: str = "requests"  # or "llm": the step search of edgegw.bench.llm
    llm: LlmSpec = LlmSpec()  # noqa: RUF009 (frozen)
    target_pid: int | None = None  # llm: the process whose CPU and RSS are read

    @property
    def loop_connections(self) -> int:
        if self.connections is not None:
            return self.connections
        return DEFAULT_CONNECTIONS if self.rate is None else DEFAULT_OPEN_LOOP_CONNECTIONS
