"""Shared pieces of the benchmark scripts in this folder, by concern.

* :mod:`common.cli`: the scripts' common arguments, device and model
  selection.
* :mod:`common.models`: the report's model list, building classifiers from
  configs, the report's training step.
* :mod:`common.timing`: warm-up, repeats, median and inter-quartile range
  (CUDA events or ``perf_counter``), competitors timed in turns.
* :mod:`common.memory`: the peak tensor memory of one call.
* :mod:`common.report`: the machine header, markdown tables, the report
  file and PNG plots.

The scripts run with this folder on ``sys.path``
(``python benchmarks/<script>.py``) and import what they need::

    from common.timing import measure
    from common.report import Report, markdown_table
"""
import os.path as osp

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
