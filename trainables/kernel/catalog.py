"""The data sets and network architectures a trial can name, with what the control plane needs
to know about them without loading any (class counts, input sizes, test-split sizes).

Pure Python (no torch): the loaders (`trainables.datasets.INFO`) and the model builders
(`trainables.models`) are keyed by these names and check at import that they agree.
"""

from __future__ import annotations

DATASETS = ("cifar10", "imagenet", "mnist", "digits", "imagenet32")
# Classes per data set (= trainables.datasets.INFO, which imports torch; a test checks they agree).
NUM_CLASSES = {"cifar10": 10, "imagenet": 1000, "mnist": 10, "digits": 10, "imagenet32": 1000}
# Input dimension d = C·H·W of a model input (= INFO[...].dim; ℓ∞ radius implied by ℓ2: r/√d).
INPUT_DIM = {"cifar10": 3072, "imagenet": 150_528, "mnist": 784, "digits": 64, "imagenet32": 3072}
# Test (validation) split sizes of the standard files; digits: this project's split of sklearn's.
STANDARD_TEST_SIZE = {
    "cifar10": 10_000,
    "imagenet": 50_000,
    "mnist": 10_000,
    "digits": 450,
    "imagenet32": 50_000,
}
ARCHS = ("cifar_resnet20", "cifar_resnet56", "cifar_resnet110", "resnet50", "lenet", "digits_cnn")
DEFAULT_ARCH = {
    "cifar10": "cifar_resnet110",
    "imagenet": "resnet50",
    "mnist": "lenet",
    "digits": "digits_cnn",
    "imagenet32": "cifar_resnet110",  # pre-training for CIFAR-10 (SmoothAdv NeurIPS appendix E.1)
}
