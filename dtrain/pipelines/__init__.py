"""Kubeflow Pipelines for dtrain (optional extra `pipelines`: kfp>=2.17).

    steps.py       what each step does, over dtrain's Client (no kfp)          any backend
                   (its checks and pure job specs in step_specs.py, the names a run takes in step_plan.py)
    components.py  KFP v2 lightweight components wrapping the steps
    hybrid.py      hybrid-cifar10: check_condition -> If local / kubernetes / sagemaker -> train
    lanes.py       lane-detection: prepare -> snapshot -> train -> evaluate -> If accurate: restore
    runner.py      list, compile (KFP IR YAML), run here with kfp.local's SubprocessRunner; beside it
                   run_records.py, run_params.py (checks before a run), run_io.py, run_tmp.py

Only runner.py is imported by the CLI; kfp loads when a pipeline is used. The SDK's calls are
runner's, here: `dtrain.pipelines.list_pipelines()`, `compile_pipeline(...)`, `run_pipeline(...)`.
"""

from dtrain.pipelines.runner import (PipelineInfo, RunResult, TaskResult, compile_pipeline, list_pipelines,
                                     run_pipeline)

__all__ = ["PipelineInfo", "RunResult", "TaskResult", "compile_pipeline", "list_pipelines", "run_pipeline"]
