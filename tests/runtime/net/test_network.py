"""The networked testbed on 127.0.0.1: an edge server (ZeroMQ ROUTER) and device processes or
threads (DEALER) running real Multi-SPIN rounds on the tiny pair.

- same math: networked tokens (and round records) equal the in-process `run_rounds` for the
  same seed and policies, with forked device processes and with `multispin device` subprocesses;
- device tokens equal the server's records (sha256 digests compared at BYE);
- authentication: wrong secret, missing AUTH, silence after HELLO: refused, no session;
- a malformed / oversized / wrong-γ message drops only that session; the others complete;
- a stalled device is timed out mid-round and resumes from the server's record by itself;
- a crashed device process is timed out, the others complete, and a restart resumes it;
- SIGTERM on a `multispin serve` subprocess drains the round and exits 0 with the log flushed;
- load: 32 device threads, 50 rounds, no deadlock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from doubles import FixedDraftLengths
from multispin.errors import MultispinError
from multispin.models.hf import HFBatchedLM, HFSequenceLM
from multispin.models.prompts import encode_prompt
from multispin.models.tiny import load_tiny_pair
from multispin.runtime.net.device import build_device_client
from multispin.runtime.net.launcher import DeviceSetup, LocalTestbed, ServerHooks, free_port, run_local_testbed
from multispin.runtime.net.server import EdgeServer
from multispin.runtime.net.server_config import ServerConfig
from multispin.runtime.round import roles
from multispin.runtime.round.engine import PolicyPair
from multispin.runtime.round.local import FixedLink, RandomMode, fixed_policy, run_rounds
from multispin.runtime.security.auth import SECRET_ENV, compute_mac
from multispin.runtime.wire import messages as P
from multispin.speculative.codecs import make_codec
from multispin.speculative.warp import SamplingParams

# real sockets, processes or models: `make test-fast` leaves these out
pytestmark = pytest.mark.integration

SECRET = "test-secret-0123456789"
PROMPTS = ["Hello edge server", "The channel is", "abc", "Speculative decoding at the edge"]


@pytest.fixture(scope="module")
def pair():
    return load_tiny_pair()


def reference(
    pair, n, gammas, modes, seed, max_new_tokens, sampling=SamplingParams(), ul="dense-fp32", dl="dense-fp32"
):
    """The in-process round loop on the same devices, prompts, drafts, seed and policies."""
    ul_c, dl_c = make_codec(ul), make_codec(dl)
    server = roles.VerifierServer(HFBatchedLM(pair.target, pair.vocab_size), sampling, ul_c, dl_c, seed)
    names = list(pair.drafts)
    devices = {
        k: roles.DraftDevice(
            k,
            HFSequenceLM(pair.drafts[names[k % len(names)]], pair.vocab_size),
            sampling,
            ul_c,
            dl_c,
            seed,
            encode_prompt(pair, PROMPTS[k % len(PROMPTS)]),
        )
        for k in range(n)
    }
    logs = run_rounds(server, devices, PolicyPair(FixedDraftLengths(gammas), modes), max_new_tokens, pair.eos_token_ids)
    return {k: d.generated for k, d in devices.items()}, logs


def read_log(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def assert_consistent(summary):
    assert summary.consistent
    for d, rec in summary.server.devices.items():
        out = summary.devices[d]
        assert out["tokens"] == rec.tokens, f"device {d}"
        assert out["digest"] == rec.digest == P.token_digest(rec.tokens).hex()
        assert rec.digest_match is True, f"device {d}: final digests differ"
        assert sum(r.tokens_gained for r in rec.rounds) == len(rec.generated), f"device {d}"


# --------------------------------------------------------------------------------------------
# Same math as the in-process loop
# --------------------------------------------------------------------------------------------


def test_forked_device_processes_match_in_process_rounds_sampled(pair, tmp_path):
    gammas = {0: 3, 1: 5, 2: 0}
    ref, ref_logs = reference(pair, 3, gammas, RandomMode(11), 11, 24, ul="dense-fp16")
    logf = tmp_path / "server.jsonl"
    summary = run_local_testbed(
        pair,
        ServerConfig.make(max_new_tokens=24, seed=11, ul_codec="dense-fp16", dl_codec="dense-fp32", round_timeout_s=60),
        DeviceSetup(3, prompts=PROMPTS, runner="fork"),
        policy=PolicyPair(FixedDraftLengths(gammas), RandomMode(11)),
        secret=SECRET,
        log_path=logf,
        timeout_s=300,
    )
    assert summary.server.stop_reason == "done"
    assert summary.tokens() == ref
    for k in range(3):
        assert [r.to_dict() for r in summary.server.devices[k].rounds] == [r.to_dict() for r in ref_logs[k]]
    assert_consistent(summary)
    modes = {r.mode for rec in summary.server.devices.values() for r in rec.rounds}
    assert {"ul", "dl"} <= modes, "both correction modes should have happened"

    lines = read_log(logf)
    rounds = [ln for ln in lines if ln["event"] == "round"]
    assert len(rounds) == summary.server.rounds
    for key in (
        "gamma",
        "rejected",
        "modes",
        "uplink_bits",
        "downlink_bits",
        "tokens_gained",
        "verify_s",
        "round_wall_s",
        "payload_bytes",
        "wire_bytes_up",
        "wire_bytes_down",
    ):
        assert key in rounds[0]
    sizes = {
        "ul": make_codec("dense-fp16").num_bytes(pair.vocab_size),
        "dl": make_codec("dense-fp32").num_bytes(pair.vocab_size),
    }
    moved = 0
    for ln in rounds:
        for d, mode in ln["modes"].items():
            assert ln["payload_bytes"][d] == sizes[mode]  # codec bytes on the wire == num_bytes(V)
            assert ln["wire_bytes_up" if mode == "ul" else "wire_bytes_down"][d] > sizes[mode]
            moved += 1
    assert moved > 0
    assert [ln["event"] for ln in lines].count("bye") == 3 and lines[-1]["event"] == "shutdown"
    assert all(ln["match"] for ln in lines if ln["event"] in ("bye", "device"))


def test_cli_device_subprocesses_match_in_process_rounds_greedy(pair, tmp_path):
    gammas = {0: 4, 1: 2}
    sampling = SamplingParams(temperature=0)
    ref, _ = reference(pair, 2, gammas, FixedLink("dl"), 3, 16, sampling=sampling)
    bed = LocalTestbed(
        "tiny",
        ServerConfig.make(max_new_tokens=16, seed=3, **sampling.model_dump(), round_timeout_s=60),
        DeviceSetup(2, prompts=PROMPTS, runner="subprocess"),
        policy=PolicyPair(FixedDraftLengths(gammas), FixedLink("dl")),
        secret=SECRET,
        log_path=tmp_path / "s.jsonl",
    )
    bed.start()
    # The secret travels in the environment, never on a command line (`ps` shows argv).
    assert all(SECRET not in " ".join(h.proc.args) for h in bed._handles.values())
    summary = bed.wait(400)
    assert summary.tokens() == ref
    assert_consistent(summary)


# --------------------------------------------------------------------------------------------
# Authentication and bad messages (raw sockets)
# --------------------------------------------------------------------------------------------


class RawClient:
    """A hand-driven DEALER socket speaking (or not) the protocol."""

    def __init__(self, ctx: zmq.Context, endpoint: str, limits: P.Limits):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.limits = limits

    def send(self, msg: P.Message | bytes) -> None:
        self.sock.send(msg if isinstance(msg, bytes) else P.encode_message(msg))

    def recv(self, timeout_s: float = 60.0) -> P.Message:
        assert self.sock.poll(int(timeout_s * 1000)), "no reply from the server"
        return P.decode_message(self.sock.recv(), self.limits)

    def join(self, device_id: int, secret: bytes, prompt=(65, 66, 67)) -> P.WelcomeMsg:
        self.send(P.HelloMsg(device_id, tuple(prompt), True, "raw"))
        ch = self.recv()
        assert isinstance(ch, P.ChallengeMsg)
        self.send(P.AuthMsg(device_id, compute_mac(secret, ch.nonce, device_id)))
        w = self.recv()
        assert isinstance(w, P.WelcomeMsg), w
        return w


def _server(pair, tmp_path, expected, mode="random", **opts):
    config = ServerConfig.make(
        port=0,
        expected_devices=expected,
        max_new_tokens=12,
        seed=1,
        join_timeout_s=120,
        history=True,
        **opts,
    )
    events: list[dict] = []
    server = EdgeServer(
        config,
        pair,
        SECRET,
        policy=fixed_policy(3, mode, config.seed),
        log_path=tmp_path / "server.jsonl",
        on_event=events.append,
    )
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("summary", server.run()), daemon=True)
    th.start()
    assert server.ready.wait(30)
    limits = P.Limits(
        vocab_size=pair.vocab_size,
        ul_payload_bytes=server.limits.ul_payload_bytes,
        dl_payload_bytes=server.limits.dl_payload_bytes,
    )
    return server, th, box, events, limits


def _thread_device(pair, endpoint, k, secret=SECRET, **kw):
    client = build_device_client(endpoint, k, secret, pair, None, PROMPTS[k % len(PROMPTS)], **kw)
    box: dict = {}

    def body():
        try:
            box["outcome"] = client.run()
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th, box


def test_wrong_or_missing_authentication_is_refused_and_gets_no_session(pair, tmp_path):
    server, th, box, events, limits = _server(pair, tmp_path, expected=2)
    ctx = zmq.Context()
    try:
        # Wrong secret (hand-driven).
        wrong = RawClient(ctx, server.endpoint, limits)
        wrong.send(P.HelloMsg(7, (1, 2), True, "raw"))
        ch = wrong.recv()
        wrong.send(P.AuthMsg(7, compute_mac(b"not-the-secret", ch.nonce, 7)))
        err = wrong.recv()
        assert isinstance(err, P.ErrorMsg) and err.code == "auth"
        # A MAC computed for another device id.
        other = RawClient(ctx, server.endpoint, limits)
        other.send(P.HelloMsg(8, (1, 2), True, "raw"))
        ch = other.recv()
        other.send(P.AuthMsg(8, compute_mac(SECRET.encode(), ch.nonce, 9)))
        assert isinstance(other.recv(), P.ErrorMsg)
        # Missing AUTH: a DRAFT right after HELLO, and a DRAFT with no HELLO at all.
        skip = RawClient(ctx, server.endpoint, limits)
        skip.send(P.HelloMsg(9, (1, 2), True, "raw"))
        assert isinstance(skip.recv(), P.ChallengeMsg)
        skip.send(P.DraftMsg.make(0, [1], [0.5]))
        err = skip.recv()
        assert isinstance(err, P.ErrorMsg) and "DRAFT: not allowed here (expected AUTH)" in err.reason
        bare = RawClient(ctx, server.endpoint, limits)
        bare.send(P.DraftMsg.make(0, [1], [0.5]))
        err = bare.recv()
        assert isinstance(err, P.ErrorMsg) and "expected HELLO" in err.reason
        # A refused identity is ignored afterwards (no second reply).
        bare.send(P.HelloMsg(10, (1,), True, "raw"))
        assert not bare.sock.poll(300)
        # A real device with the wrong secret gives up at once with a one-line error.
        bad_th, bad_box = _thread_device(pair, server.endpoint, 0, secret="wrong-secret-123")
        bad_th.join(60)
        assert isinstance(bad_box.get("error"), MultispinError)
        assert "server refused (auth)" in str(bad_box["error"])

        devs = [_thread_device(pair, server.endpoint, k) for k in range(2)]
        for t, _ in devs:
            t.join(120)
        th.join(60)
    finally:
        ctx.destroy(linger=0)
    summary = box["summary"]
    assert sorted(summary.devices) == [0, 1]  # no session for 7, 8, 9, 10 or the wrong-secret 0
    assert summary.refused == 5
    assert all(rec.finished and rec.digest_match for rec in summary.devices.values())
    refusals = [e for e in events if e["event"] == "auth_refused"]
    assert {e["device"] for e in refusals} == {0, 7, 8}
    assert all(e["reason"] for e in refusals)
    for _, b in devs:
        assert b["outcome"].tokens == summary.devices[b["outcome"].device_id].tokens


def test_bad_messages_drop_only_that_session(pair, tmp_path):
    server, th, box, events, limits = _server(pair, tmp_path, expected=5, round_timeout_s=60, idle_timeout_s=1.0)
    ctx = zmq.Context()
    try:
        devs = [_thread_device(pair, server.endpoint, k) for k in range(2)]
        raws = {}
        for k in (2, 3, 4):
            raws[k] = RawClient(ctx, server.endpoint, limits)
            raws[k].join(k, SECRET.encode())
        plans = {k: c.recv() for k, c in raws.items()}
        assert all(isinstance(p, P.PlanMsg) and p.round == 0 and p.gamma == 3 for p in plans.values())
        oversized = msgpack.packb(
            {"t": "DRAFT", "round": 0, "tokens": [1, 2, 3], "q": b"\x00" * 24, "pad": b"x" * 600}, use_bin_type=True
        )
        raws[2].send(oversized)
        raws[3].send(b"\x93\x01\x02")  # msgpack array, truncated
        raws[4].send(P.DraftMsg.make(0, [1, 2, 3, 4], [0.5] * 4))  # PLAN asked for γ = 3
        reasons = {}
        for k, c in raws.items():
            err = c.recv()
            assert isinstance(err, P.ErrorMsg) and err.code == "protocol"
            reasons[k] = err.reason
        # Far beyond any limit: the transport itself cuts this unauthenticated peer off.
        huge = ctx.socket(zmq.DEALER)
        huge.setsockopt(zmq.LINGER, 0)
        huge.connect(server.endpoint)
        huge.send(b"\x00" * (8 << 20))
        for t, _ in devs:
            t.join(120)
        th.join(60)
    finally:
        ctx.destroy(linger=0)
    assert "DRAFT: message of" in reasons[2] and "exceeds its limit" in reasons[2]
    assert "malformed msgpack" in reasons[3]
    assert "DRAFT.tokens: 4 ids but PLAN asked for γ = 3" in reasons[4]
    summary = box["summary"]
    assert summary.stop_reason == "idle"  # 0 and 1 done; 2, 3, 4 never came back
    for k in (0, 1):
        rec = summary.devices[k]
        assert rec.finished and rec.digest_match and not rec.drops
    for k in (2, 3, 4):
        rec = summary.devices[k]
        assert not rec.finished and rec.drops == [reasons[k]] and rec.rounds == []
    drops = {e["device"]: e["reason"] for e in events if e["event"] == "drop"}
    assert drops == reasons
    first = summary.events[0]
    assert sorted(first.records) == [0, 1] and sorted(first.dropped) == [2, 3, 4]


# --------------------------------------------------------------------------------------------
# Stalls, crashes, resume
# --------------------------------------------------------------------------------------------


def test_stalled_device_is_timed_out_and_resumes_from_the_server_record(pair, tmp_path):
    gammas = {0: 3, 1: 3, 2: 3}
    ref, _ = reference(pair, 3, gammas, RandomMode(4), 4, 20)
    summary = run_local_testbed(
        pair,
        ServerConfig.make(max_new_tokens=20, seed=4, round_timeout_s=3.0),
        DeviceSetup(3, prompts=PROMPTS, runner="thread", faults={1: "stall:2:6"}),
        policy=PolicyPair(FixedDraftLengths(gammas), RandomMode(4)),
        secret=SECRET,
        log_path=tmp_path / "s.jsonl",
        timeout_s=300,
    )
    rec = summary.server.devices[1]
    assert rec.sessions == 2 and len(rec.drops) == 1 and "no DRAFT within 3 s in round 2" in rec.drops[0]
    stalled_round = summary.server.events[2]
    assert list(stalled_round.dropped) == [1] and sorted(stalled_round.records) == [0, 2]
    assert_consistent(summary)
    assert summary.devices[1]["sessions"] == 2 and rec.finished
    # The other devices' tokens do not depend on who shares their batch.
    assert summary.tokens()[0] == ref[0] and summary.tokens()[2] == ref[2]
    resumes = [ln for ln in read_log(tmp_path / "s.jsonl") if ln["event"] == "resume"]
    assert [ln["device"] for ln in resumes] == [1]


def test_crashed_device_process_is_dropped_at_once_and_a_restart_resumes_it(pair, tmp_path):
    """The device process exits on PLAN of round 3: the server learns from the transport that its
    connection is gone and ends the round for the others at once, not at the 60 s round timeout."""
    gammas = {0: 2, 1: 2, 2: 2}
    ref, _ = reference(pair, 3, gammas, FixedLink("ul"), 6, 20)
    dropped = threading.Event()

    def on_event(ev):
        if ev["event"] == "drop" and ev["device"] == 2:
            dropped.set()

    bed = LocalTestbed(
        pair,
        ServerConfig.make(max_new_tokens=20, seed=6, round_timeout_s=60.0, idle_timeout_s=120),
        DeviceSetup(3, prompts=PROMPTS, runner="fork", faults={2: "crash:3"}),
        policy=PolicyPair(FixedDraftLengths(gammas), FixedLink("ul")),
        hooks=ServerHooks(on_event=on_event),
        secret=SECRET,
        log_path=tmp_path / "s.jsonl",
    )
    bed.start()
    assert dropped.wait(240), "the crashed device was never dropped"
    crashed = bed._handles[2]
    crashed.join(10)
    assert crashed.proc.exitcode == 17  # the device process died mid-round (after PLAN)
    time.sleep(0.5)  # a few more rounds for the others
    bed.start_device(2, runner="thread")  # restart: same id, authenticates, resumes
    summary = bed.wait(300)
    rec = summary.server.devices[2]
    assert rec.sessions == 2 and rec.drops[0].startswith("connection lost")
    crash_round = summary.server.events[3]
    assert list(crash_round.dropped) == [2] and sorted(crash_round.records) == [0, 1]
    assert crash_round.round_wall_s < 20  # not held for the round timeout
    assert rec.finished and len(rec.generated) == 20
    assert_consistent(summary)
    assert summary.tokens()[0] == ref[0] and summary.tokens()[1] == ref[1]
    # Randomness keyed on the committed length: the crash and the rounds it missed change nothing.
    assert summary.tokens()[2] == ref[2]


def _greedy_reference(pair, prompt_ids, n):
    import torch

    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            logits = pair.target(torch.tensor([ids])).logits[0, -1, : pair.vocab_size]
            ids.append(int(logits.to(torch.float32).argmax()))
    return ids[len(prompt_ids) :]


def _greedy_raw_session(pair, tmp_path, ctx, round_timeout_s):
    """A greedy UL server for one hand-driven device 1 that has joined and got round 0's PLAN."""
    prompt = encode_prompt(pair, PROMPTS[1])
    greedy = _greedy_reference(pair, prompt, 12)
    server, th, box, events, limits = _server(
        pair, tmp_path, expected=1, temperature=0.0, mode="ul", round_timeout_s=round_timeout_s, idle_timeout_s=60
    )
    raw = RawClient(ctx, server.endpoint, limits)
    raw.join(1, SECRET.encode(), prompt=prompt)
    plan = raw.recv()
    assert isinstance(plan, P.PlanMsg) and (plan.round, plan.gamma) == (0, 3)
    return prompt, greedy, server, th, box, events, raw


def test_session_lost_after_verify_gains_nothing_and_resume_continues_exactly(pair, tmp_path):
    """A device verified with 2 accepted tokens and then silent in the UL correction: timed out,
    nothing committed, target cache rolled back; the resumed device then produces exactly the
    target's greedy continuation (a stale cache or a half-committed round would break it)."""
    ctx = zmq.Context()
    try:
        prompt, greedy, server, th, box, events, raw = _greedy_raw_session(pair, tmp_path, ctx, 2.0)
        wrong = (greedy[2] + 1) % pair.vocab_size
        raw.send(P.DraftMsg.make(0, [greedy[0], greedy[1], wrong], [1.0, 1.0, 1.0]))
        verdict = raw.recv()
        assert isinstance(verdict, P.VerdictMsg)
        assert verdict.num_accepted == 2 and verdict.mode == "ul" and verdict.payload is None
        err = raw.recv(10)  # stay silent: no Q_PAYLOAD
        assert isinstance(err, P.ErrorMsg) and err.code == "timeout" and "no Q_PAYLOAD" in err.reason
        assert server.records[1] == prompt  # nothing committed for the lost round
        dev_th, dev_box = _thread_device(pair, server.endpoint, 1)
        dev_th.join(120)
        th.join(60)
    finally:
        ctx.destroy(linger=0)
    outcome = dev_box["outcome"]
    rec = box["summary"].devices[1]
    assert rec.generated == greedy and outcome.generated == greedy
    assert rec.sessions == 2 and rec.digest_match


def test_an_accepted_round_is_one_commit_carrying_the_next_plan_and_a_device_lost_before_drafting_it_resumes(
    pair, tmp_path
):
    """Protocol 2 on the wire: a draft the target accepts whole gets no VERDICT, its COMMIT (bonus
    included) carries round 1's PLAN. The device leaves right then, between that COMMIT and the
    DRAFT it owes; it resumes from the server's record and ends with the target's greedy text,
    every token committed once (round 0's four, then the rest, none for the round it missed)."""
    ctx = zmq.Context()
    try:
        prompt, greedy, server, th, box, events, raw = _greedy_raw_session(pair, tmp_path, ctx, 5.0)
        raw.send(P.DraftMsg.make(0, greedy[:3], [1.0, 1.0, 1.0]))
        commit = raw.recv()  # no VERDICT first: all three accepted
        assert isinstance(commit, P.CommitMsg) and commit.round == 0
        assert list(commit.tokens) == greedy[:4] and commit.next_gamma == 3
        assert commit.digest == P.token_digest(list(prompt) + greedy[:4])
        raw.sock.close(linger=0)  # gone before drafting round 1
        deadline = time.monotonic() + 30
        while server.proto.devices[1].conn is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.records[1] == list(prompt) + greedy[:4]  # round 0 committed, nothing more
        dev_th, dev_box = _thread_device(pair, server.endpoint, 1)
        dev_th.join(120)
        th.join(60)
    finally:
        ctx.destroy(linger=0)
    rec = box["summary"].devices[1]
    assert rec.generated == greedy and dev_box["outcome"].generated == greedy
    assert rec.sessions == 2 and rec.digest_match and rec.num_rounds == len(rec.rounds)
    assert sum(r.tokens_gained for r in rec.rounds) == len(greedy)  # committed once each
    assert [e for e in events if e["event"] == "drop"][0]["device"] == 1


def test_sigterm_on_server_subprocess_drains_and_exits_cleanly(pair, tmp_path):
    port = free_port()
    logf, summf = tmp_path / "serve.jsonl", tmp_path / "summary.json"
    env = dict(os.environ, **{SECRET_ENV: SECRET, "MULTISPIN_TEST_THREADS": "1"})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from multispin.cli import main; main()",
            "serve",
            "--pair",
            "tiny",
            "--port",
            str(port),
            "--devices",
            "2",
            "--max-new-tokens",
            "2000",
            "--draft-len",
            "2",
            "--threads",
            "1",
            "--log",
            str(logf),
            "--summary",
            str(summf),
            "--round-timeout",
            "30",
            "--insecure",
            "--journal",
            str(tmp_path / "journal.sqlite"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not (logf.exists() and logf.read_text().strip()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        endpoint = f"tcp://127.0.0.1:{port}"
        devs = [_thread_device(pair, endpoint, k) for k in range(2)]
        while time.monotonic() < deadline:
            if sum(1 for ln in read_log(logf) if ln["event"] == "round") >= 3:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = read_log(logf)
    assert lines[-1]["event"] == "shutdown" and lines[-1]["reason"] == "SIGTERM"
    rounds = [ln for ln in lines if ln["event"] == "round"]
    assert rounds and lines[-1]["rounds"] == len(rounds)
    summary = json.loads(summf.read_text())
    for t, b in devs:
        t.join(60)
        outcome = b["outcome"]
        assert outcome.reason == "SIGTERM" and not outcome.finished
        rec = summary["devices"][str(outcome.device_id)]
        assert outcome.tokens == rec["tokens"] and rec["digest_match"] is True
        assert len(outcome.generated) > 0 and rec["num_rounds"] > 0 and rec["rounds"] == []  # no history kept
    assert "stopped (SIGTERM)" in out


# --------------------------------------------------------------------------------------------
# Load
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_32_devices_50_rounds_without_deadlock(pair, tmp_path):
    """32 devices as threads of this process, each with its own DEALER socket and draft KV cache
    (32 processes each importing torch would not fit a 2-core box); 50 rounds, mixed modes."""
    n = 32
    summary = run_local_testbed(
        pair,
        ServerConfig.make(max_new_tokens=500, rounds=50, seed=0, round_timeout_s=120),
        DeviceSetup(n, runner="thread"),
        policy=PolicyPair(FixedDraftLengths({k: 1 + k % 3 for k in range(n)}), RandomMode(0)),
        secret=SECRET,
        log_path=tmp_path / "load.jsonl",
        timeout_s=600,
    )
    assert summary.server.stop_reason == "rounds" and summary.server.rounds == 50
    assert sorted(summary.devices) == list(range(n))
    for d, rec in summary.server.devices.items():
        assert len(rec.rounds) == 50 and not rec.drops
        assert summary.devices[d]["reason"] == "rounds"
    assert_consistent(summary)
