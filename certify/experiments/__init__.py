"""Experiments that train attention layers in this repository (the demo's toy task; see README.md here)."""

from ._toy import ToyTask as ToyTask, toy_batch as toy_batch, train_toy_layer as train_toy_layer
from ._language_model import (
    ATTENTIONS as ATTENTIONS,
    CharTransformer as CharTransformer,
    LMConfig as LMConfig,
    TrainResult as TrainResult,
    causal_attention as causal_attention,
    certify_model as certify_model,
    evaluate_bpc as evaluate_bpc,
    input_radius as input_radius,
    lm_experiment as lm_experiment,
    stability_experiment as stability_experiment,
    train_language_model as train_language_model,
)
from ._ptb import CharCorpus as CharCorpus, default_data_dir as default_data_dir, load_ptb as load_ptb, tiny_corpus as tiny_corpus
from ._classifier import (ClassifierTask as ClassifierTask, ToyClassifier as ToyClassifier, classifier_batch as classifier_batch, load_classifier as load_classifier, save_classifier as save_classifier, train_classifier as train_classifier)
from ._vision import (
    DigitsTransformer as DigitsTransformer,
    VisionResult as VisionResult,
    attention_inputs as attention_inputs,
    attention_layer as attention_layer,
    layer_norm_radius as layer_norm_radius,
    train_digits_transformer as train_digits_transformer,
)
