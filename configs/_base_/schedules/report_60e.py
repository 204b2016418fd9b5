# The training schedule of the LeCT report (Appendix): AdamW, lr 1e-3,
# weight decay 0.05, cosine decay over 60 epochs, gradient-norm clip 5,
# batch 64 (set by the dataset config).
optim_wrapper = dict(
    optimizer=dict(
        type='AdamW', lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999),
        eps=1e-8),
    clip_grad=dict(max_norm=5.0),
)

# Cosine decay to 0 from the first to the last epoch (`end` defaults to
# train_cfg.max_epochs), updated every iteration.
param_scheduler = [
    dict(type='CosineAnnealingLR', by_epoch=True, convert_to_iter_based=True)
]

train_cfg = dict(by_epoch=True, max_epochs=60, val_interval=1)
val_cfg = dict()
test_cfg = dict()

# `--auto-scale-lr` scales lr by (total batch size) / 64.
auto_scale_lr = dict(base_batch_size=64)
