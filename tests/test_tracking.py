"""TensorBoard and W&B logging (goldfish.tracking): the same scalars as metrics.jsonl, read back with each tool's
own reader; W&B offline by default, without one network connection; missing extras refused in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tolerances import U32
from train_helpers import REPO, cli_env, make_prepared, overrides_of, tiny_config

from goldfish.config import from_dict
from goldfish.errors import ConfigError, UserError
from goldfish.io import read_jsonl
from goldfish.tracking import Tracker, scalars
from goldfish.train_config import TrainConfig

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

GOLDFISH = {"type": "goldfish", "goldfish": {"k": 4, "h": 13}}


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of the event files in ``folder``, read by TensorBoard's own loader (which applies the
    purge of a resumed session, as the TensorBoard UI does)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def wandb_records(run_dir: Path) -> list:
    """The protobuf records of an offline W&B run file (``run-<id>.wandb``): a ':W&B' header, then LevelDB-log
    blocks of 32 KiB holding records (crc32c 4 bytes, length 2 bytes, type 1 byte: 1 full, 2 first, 3 mid, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, out, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def wandb_history(run_dir: Path) -> list[dict[str, float]]:
    rows = []
    for r in wandb_records(run_dir):
        if r.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): i.value_json for i in r.history.item}
            rows.append({k: json.loads(v) for k, v in items.items() if not k.startswith("_")})
    return rows


def wandb_run(run_dir: Path):
    return next(r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run")


class ConnectionRecorder:
    """A local TCP server that counts every connection made to it (a stand-in for the W&B server and any proxy)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """One Goldfish run with TensorBoard and W&B (offline) on, trained by `goldfish train` in a subprocess whose
    every HTTP(S) route (W&B base URL, proxies) leads to a connection recorder."""
    root = tmp_path_factory.mktemp("tracked")
    data = make_prepared(root / "data")
    cfg = tiny_config(
        data,
        root / "run",
        loss=GOLDFISH,
        logging={"tensorboard": True, "wandb": True, "run_name": "tiny", "group": "g"},
    )
    recorder = ConnectionRecorder()
    env = {k: v for k, v in cli_env().items() if not k.startswith("WANDB_")}
    env.update(
        {
            "WANDB_BASE_URL": recorder.url,
            "WANDB_MODE": "online",  # the config's offline must win
            "HTTP_PROXY": recorder.url,
            "HTTPS_PROXY": recorder.url,
            "http_proxy": recorder.url,
            "https_proxy": recorder.url,
            "NO_PROXY": "",
            "no_proxy": "",
            "HOME": str(root / "home"),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "goldfish", "train", *overrides_of(cfg)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    recorder.close()
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run", recorder.connections


def test_tensorboard_holds_every_metrics_jsonl_scalar(logged_run):
    run, _ = logged_run
    records = read_jsonl(run / "metrics.jsonl")
    events = tensorboard_scalars(run / "tensorboard")
    expected = {tag for r in records for tag in scalars(r)}
    assert (
        {
            "train/kept_loss",
            "train/dropped_loss",
            "train/kept_tokens",
            "train/dropped_tokens",
            "train/lr",
            "train/grad_norm",
            "train/tokens_per_s",
            "train/mfu",
        }
        <= expected
        == set(events)
    )
    for r in records:
        for tag, value in scalars(r).items():
            # event files store float32: one rounding to nearest, within u32 of the value relative
            assert events[tag][r["step"]] == pytest.approx(value, rel=U32, abs=0)


def test_wandb_offline_run_holds_the_same_scalars_and_made_no_connection(logged_run):
    run, connections = logged_run
    assert connections == 0
    (run_dir,) = (run / "wandb").glob("offline-run-*")
    records = read_jsonl(run / "metrics.jsonl")
    history = wandb_history(run_dir)
    assert [h["train/step"] for h in history] == [r["step"] for r in records]
    for h, r in zip(history, records):
        # JSON on both sides (W&B's value_json, metrics.jsonl): a float64's shortest repr reads back exactly
        assert {k: v for k, v in h.items() if k != "train/step"} == scalars(r)
    meta = wandb_run(run_dir)
    assert (meta.display_name, meta.run_group, meta.project) == ("tiny", "g", "goldfish")
    assert meta.run_id == (run / "wandb" / "goldfish-run-id").read_text().strip()


def test_a_resumed_session_replaces_the_steps_after_its_checkpoint(tmp_path):
    cfg = from_dict(TrainConfig, tiny_config(tmp_path / "data", tmp_path / "run", logging={"tensorboard": True}))
    with Tracker(cfg) as first:
        for step in range(1, 5):
            first.log({"step": step, "loss": float(step)})
    with Tracker(cfg, start_step=2) as second:  # resumed from the checkpoint of step 2: steps 3, 4 again
        for step in range(3, 5):
            second.log({"step": step, "loss": 10.0 * step})
    assert tensorboard_scalars(tmp_path / "run" / "tensorboard")["train/loss"] == {1: 1.0, 2: 2.0, 3: 30.0, 4: 40.0}


def test_only_the_main_process_writes(tmp_path):
    cfg = from_dict(
        TrainConfig, tiny_config(tmp_path / "d", tmp_path / "run", logging={"tensorboard": True, "wandb": True})
    )
    with Tracker(cfg, enabled=False) as tracker:
        tracker.log({"step": 1, "loss": 1.0})
    assert not (tmp_path / "run").exists()


def test_online_wandb_without_a_key_is_refused(tmp_path, monkeypatch):
    for key in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    cfg = from_dict(
        TrainConfig, tiny_config(tmp_path / "d", tmp_path / "run", logging={"wandb": True, "wandb_mode": "online"})
    )
    with pytest.raises(UserError, match="needs your W&B API key: set WANDB_API_KEY or run `wandb login`"):
        Tracker(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra", ["tensorboard", "wandb"])
def test_a_missing_extra_is_refused_in_one_line(tmp_path, monkeypatch, capsys, extra):
    from goldfish.cli import main

    monkeypatch.setitem(sys.modules, extra, None)  # importlib.util.find_spec(extra) is None: as if not installed
    cfg = tiny_config(tmp_path / "data", tmp_path / "run", logging={extra: True})
    assert main(["train", *overrides_of(cfg)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: logging: logging.{extra}=true needs the {extra} package: pip install {extra} (the toolkit's "
        f"'{extra}' extra) or set logging.{extra}=false"
    ]
    assert not (tmp_path / "run").exists()


def test_logging_is_not_part_of_the_fingerprint(tmp_path):
    from goldfish.train_config import train_fingerprint

    plain = from_dict(TrainConfig, tiny_config(tmp_path, tmp_path / "run"))
    logged = from_dict(TrainConfig, tiny_config(tmp_path, tmp_path / "run", logging={"tensorboard": True}))
    assert train_fingerprint(plain, "x") == train_fingerprint(logged, "x")
    with pytest.raises(ConfigError, match="logging.wandb_mode='cloud' is not one of 'offline', 'online'"):
        from_dict(TrainConfig, {"logging": {"wandb_mode": "cloud"}})
