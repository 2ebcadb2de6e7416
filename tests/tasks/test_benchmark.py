"""The Celery task of ``python -m benchmark run --celery``: its name and its body (no broker needed).

The integration test with a real worker (``@pytest.mark.celery``) is pending the shared Celery fixtures.
"""

from __future__ import annotations

import numpy as np

from benchmark.engine import (
    CELERY_TASK_NAME,
    EngineConfig,
    InstanceResult,
    config_to_dict,
    instance_file_name,
    sample_to_dict,
)
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
