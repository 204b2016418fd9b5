# Runtime settings shared by every config (mmpretrain's default_runtime, plus
# lect_mm's registration, best-checkpoint saving, exact resumption, divergence
# stop and synchronised BatchNorm statistics in DDP).

# Importing lect_mm registers its blocks, backbones, datasets and engine
# parts into mmpretrain's registries, so mmpretrain's own tools run these
# configs too.
custom_imports = dict(imports=['lect_mm'], allow_failed_imports=False)
default_scope = 'mmpretrain'
# mmengine's Runner that loads checkpoints verified and strictly, resumes
# only from intact ones and locks the work dir (lect_mm.engine.runner).
runner_type = 'LectRunner'

default_hooks = dict(
    # record the time of every iteration.
    timer=dict(type='IterTimerHook'),
    # print the log every 50 iterations (and at the end of every epoch).
    logger=dict(type='LoggerHook', interval=50),
    # step the parameter schedulers.
    param_scheduler=dict(type='ParamSchedulerHook'),
    # save a checkpoint every epoch, keep the last 3 and the best one;
    # atomic writes with a digest, old ones removed after the new is safe.
    checkpoint=dict(
        type='SafeCheckpointHook',
        interval=1,
        max_keep_ckpts=3,
        save_best='accuracy/top1',
        rule='greater'),
    # set the sampler's epoch (shuffling order) in distributed training.
    sampler_seed=dict(type='DistSamplerSeedHook'),
    # save/restore the random generators, so that a resumed run ends with
    # the same weights as an uninterrupted one.
    rng_state=dict(type='RNGStateHook'),
    # stop a diverging run (3 non-finite losses in a row, or non-finite
    # weights at an epoch's end or a checkpoint) with an error naming the
    # iteration and learning rate, before it saves or validates that model.
    non_finite_loss=dict(type='NonFiniteLossHook', patience=3),
    # DDP: average the BatchNorm statistics over the ranks after every
    # training epoch, before its checkpoint and validation, so that all
    # ranks validate, and rank 0 saves, the same model (no-op on 1 process).
    sync_buffers=dict(type='SyncBuffersHook'),
    # validation results visualization, set True to enable it.
    visualization=dict(type='VisualizationHook', enable=False),
)

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    # tools/train.py switches to gloo when there is no GPU.
    dist_cfg=dict(backend='nccl'),
)

vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(type='UniversalVisualizer', vis_backends=vis_backends)

log_level = 'INFO'

# load weights from this checkpoint
load_from = None
# a checkpoint that does not fit the model (missing, unexpected or
# size-mismatched keys) stops the run; False loads what fits (e.g. to
# fine-tune with a new head: --cfg-options load_from_strict=False)
load_from_strict = True
# resume training (weights, optimizer, schedulers, RNG) from load_from, or
# from the latest checkpoint in the work dir if load_from is None
resume = False
# on one of these signals (schedulers send SIGTERM before they kill a job,
# SLURM SIGUSR1 with --signal=USR1@SECONDS) training finishes the iteration
# in progress, saves iter_<N>.pth and exits with status 75; --resume goes on
# from that iteration (docs/cluster.md). None turns it off.
stop_signals = ['SIGTERM', 'SIGUSR1']

# A fixed seed makes runs repeatable; `deterministic=True` also removes the
# nondeterminism of cuDNN at some speed cost.
randomness = dict(seed=0, deterministic=False)
