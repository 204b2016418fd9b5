# Any timm model (no pretrained weights) on Fashion-MNIST for a 2-core CPU,
# under the `cpu` protocol of tools/benchmark_accuracy.py: the same data,
# transforms, batch, optimiser and cosine schedule as the zoo's
# *_fashion_mnist_cpu.py configs. mmpretrain's TimmClassifier wraps
# timm.create_model(model_name, ...); pick the model on the command line:
#   python tools/train.py configs/fashion_mnist/timm_fashion_mnist_cpu.py \
#       --cfg-options model.model_name=mobilevit_xxs
# lr 1e-3 is the LeCT report's lr for models with attention; its pure
# convnets (ResNet, ConvNeXt) take 6e-3 (optim_wrapper.optimizer.lr=6e-3).
_base_ = [
    '../_base_/datasets/fashion_mnist_64px.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)

# TimmClassifier hands its preprocessor to mmengine's BaseModel, which builds
# it outside mmpretrain's scope: the type names its registry.
data_preprocessor = dict(type='mmpretrain.ClsDataPreprocessor')

model = dict(
    type='TimmClassifier',
    model_name='resnet18',
    pretrained=False,
    num_classes=10,
    loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
)
