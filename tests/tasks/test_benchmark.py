"""The Celery task of ``python -m benchmark run --celery``: its name, its body, and the fan-out through a
real broker to a real worker process."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.engine import (
    CELERY_TASK_NAME,
    EngineConfig,
    InstanceResult,
    config_to_dict,
    instance_file_name,
    sample_to_dict,
)
from config.celery import app as celery_app
from tasks.benchmark import benchmark_evaluate_instance


def test_task_is_registered_under_the_name_the_engine_sends():
    assert benchmark_evaluate_instance.name == CELERY_TASK_NAME


def test_task_body_writes_the_instance_file(tmp_path):
    from PIL import Image

    from benchmark.datasets import open_dataset

    root = tmp_path / "GrabCut"
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    Image.fromarray(np.full((16, 24, 3), 80, np.uint8)).save(root / "data_GT" / "one.png")
    mask = np.zeros((16, 24), np.uint8)
    mask[4:12, 6:18] = 255
    Image.fromarray(mask).save(root / "boundary_GT" / "one.bmp")
    (sample,) = open_dataset(root, "grabcut").samples
    config = EngineConfig(max_clicks=2, group_bounds=((0.0, 0.5), (0.5, 1.0)))
    payload = {
        "method": "embedded",
        "predictor_options": {},
        "click_model": "uniform",
        "config": config_to_dict(config),
        "out_dir": str(tmp_path / "out"),
        "sample": sample_to_dict(sample),
        "real_clicks_xy": [[10.0, 8.0]],
    }
    key = benchmark_evaluate_instance.run(payload)  # the task body, run in this process
    assert key == {"dataset": "GrabCut", "image_stem": "one", "object_stem": ""}
    result = InstanceResult.load(tmp_path / "out" / "instances" / instance_file_name(sample.key))
    assert result.config_json == config.fingerprint()
    assert result.group_iou.shape == (2, 1, 2) and result.user_iou.shape == (1,)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_run_celery_fans_out_to_a_real_worker_and_matches_the_local_run(tmp_path, celery_worker, settings):
    """The engine sends one task per instance by name through a bare client; the worker of
    config.celery:app writes the instance files; the results equal an in-process run's."""
    from PIL import Image

    from benchmark.datasets import open_dataset
    from benchmark.engine import RunSpec, load_results, run_celery, run_local

    root = tmp_path / "GrabCut"
    (root / "data_GT").mkdir(parents=True)
    (root / "boundary_GT").mkdir()
    for index, stem in enumerate(("a", "b")):
        Image.fromarray(np.full((20, 28, 3), 60 + 40 * index, np.uint8)).save(
            root / "data_GT" / f"{stem}.png"
        )
        mask = np.zeros((20, 28), np.uint8)
        mask[5 + index : 15, 6 : 20 - index] = 255
        Image.fromarray(mask).save(root / "boundary_GT" / f"{stem}.bmp")
    samples = open_dataset(root, "grabcut").samples
    config = EngineConfig(max_clicks=2, group_bounds=((0.0, 0.5), (0.5, 1.0)))

    def spec(out):
        return RunSpec(
            method="embedded", predictor_options={}, click_model="uniform", config=config, out_dir=str(out)
        )

    run_celery(
        spec=spec(tmp_path / "celery"),
        samples=samples,
        real_clicks={},
        broker_url=celery_app.conf["broker_url"],
        broker_transport_options=celery_app.conf.get("broker_transport_options"),
        timeout_seconds=180,
        poll_seconds=0.2,
    )
    assert "benchmark_evaluate_instance" in celery_worker.log()
    run_local(spec=spec(tmp_path / "local"), samples=samples, real_clicks={}, workers=1)
    remote, local = load_results(tmp_path / "celery"), load_results(tmp_path / "local")
    assert [r.key for r in remote] == [r.key for r in local] == sorted(s.key for s in samples)
    for a, b in zip(remote, local, strict=True):
        np.testing.assert_array_equal(a.base_iou, b.base_iou)
        np.testing.assert_array_equal(a.group_clicks, b.group_clicks)
