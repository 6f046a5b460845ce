"""Deterministic Raft simulations: many seeded fault schedules against the invariants.

- ``RAFT_SIM_SEEDS`` (default 10000): how many core seeds to run (split across test cases).
- ``RAFT_SIM_SEED=N``: replay core seed N only (``-k replay``).
- ``RAFT_SIM_DRIVER_SEED=N``: replay driver seed N only (``-k replay``).

A failure names its seed and the replay command.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from controller.raft.core import RaftNode
from controller.raft.messages import MsgPreVote, MsgPreVoteResp, MsgVote, MsgVoteResp, ReadState
from tests.sim.raft_driver_sim import run_driver_seed
from tests.sim.raft_sim import InvariantViolation, run_seed

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "10000"))
CHUNKS = 10
DRIVER_SEEDS = 12
REPLAY_SEED = os.environ.get("RAFT_SIM_SEED")
REPLAY_DRIVER_SEED = os.environ.get("RAFT_SIM_DRIVER_SEED")
REPLAYING = REPLAY_SEED is not None or REPLAY_DRIVER_SEED is not None


@pytest.fixture(autouse=True)
def quiet_raft_logs() -> Iterator[None]:
    """Elections and step-downs are routine here; keep the log capture small and fast."""
    logger = logging.getLogger("controller.raft")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _replay_hint(var: str, seed: int) -> str:
    return f"{var}={seed} bin/test tests/sim/test_raft_sim.py -k replay"


@pytest.mark.skipif(REPLAYING, reason="replaying a single seed")
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_core_simulation_keeps_raft_invariants(chunk: int) -> None:
    lo, hi = chunk * SEEDS // CHUNKS, (chunk + 1) * SEEDS // CHUNKS
    for seed in range(lo, hi):
        try:
            run_seed(seed)
        except Exception as exc:
            msg = f"raft sim seed {seed} failed: {exc!r}\nreplay: {_replay_hint('RAFT_SIM_SEED', seed)}"
            print(msg)
            raise AssertionError(msg) from exc


@pytest.mark.skipif(REPLAYING, reason="replaying a single seed")
@pytest.mark.parametrize("seed", range(DRIVER_SEEDS))
def test_driver_simulation_keeps_raft_invariants(seed: int) -> None:
    try:
        run_driver_seed(seed, 3 if seed % 2 == 0 else 5)
    except BaseException as exc:
        msg = f"raft driver sim seed {seed} failed: {exc!r}\nreplay: {_replay_hint('RAFT_SIM_DRIVER_SEED', seed)}"
        print(msg)
        raise AssertionError(msg) from exc


@pytest.mark.skipif(not REPLAYING, reason="set RAFT_SIM_SEED or RAFT_SIM_DRIVER_SEED to replay")
def test_replay() -> None:
    logging.getLogger("controller.raft").setLevel(logging.DEBUG)
    if REPLAY_SEED is not None:
        sim = run_seed(int(REPLAY_SEED))
        print(sim.summary())
    if REPLAY_DRIVER_SEED is not None:
        seed = int(REPLAY_DRIVER_SEED)
        run_driver_seed(seed, 3 if seed % 2 == 0 else 5)


# --- the simulation has teeth: deliberately broken cores must be caught ----------------------


class VotesForStaleLogs(RaftNode):
    """Bug: grants (pre-)votes without the §5.4.1 up-to-date check."""

    def _handle_vote_request(self, m: MsgVote | MsgPreVote) -> None:
        pre = isinstance(m, MsgPreVote)
        can_vote = (
            self.vote == m.frm or (self.vote is None and self.lead is None) or (pre and m.term > self.term)
        )
        if not can_vote:
            resp = MsgPreVoteResp if pre else MsgVoteResp
            self._send(resp(m.frm, self.id, self.term, True))
        elif pre:
            self._send(MsgPreVoteResp(m.frm, self.id, m.term, False))
        else:
            self._election_elapsed = 0
            self.vote = m.frm
            self._send(MsgVoteResp(m.frm, self.id, m.term, False))


class ReadsWithoutQuorum(RaftNode):
    """Bug: releases read-index requests without confirming leadership."""

    def _start_read(self, context: bytes) -> None:
        self._read_states.append(ReadState(self.log.committed, context))


@pytest.mark.parametrize("mutant", [VotesForStaleLogs, ReadsWithoutQuorum])
def test_simulation_catches_a_deliberately_broken_core(mutant: type[RaftNode]) -> None:
    for seed in range(2000):
        try:
            run_seed(seed, mutant)
        except InvariantViolation:
            return
    pytest.fail(f"{mutant.__name__} survived 2000 seeds: the simulation lost its teeth")
