"""scikit-learn's own estimator checks on the three estimators (with a tiny random BERT).

The checks build their data as numeric arrays; our estimators take texts or tokenized sentences
and reject numbers with a ``TypeError`` that says what to pass. Each check that can only run on
numeric data is listed in ``expected_failed_checks`` with that reason, and its text-data
counterpart is tested in ``test_sklearn_contract.py``.
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from contextembed.sklearn import SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder

from sklearn_test_models import tiny_bert_path

ENCODER = tiny_bert_path()

ESTIMATORS = [
    TextEmbedder(ENCODER, max_epochs=2),
    TokenEmbedder(ENCODER, max_epochs=2),
    SequenceTagger(TokenEmbedder(ENCODER, max_epochs=2), n_threads=1),  # the thread bound wraps fit and predict
    TextPairEmbedder(ENCODER, max_epochs=2),
]

NUMERIC_X = (
    "fits on a numeric array; {name} takes {kind} and raises TypeError on numbers "
    "(the text-data version is in test_sklearn_contract.py)"
)

#: checks that generate numeric X (all three estimators)
NUMERIC_CHECKS = [
    "check_fit_score_takes_y",
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self",
    "check_readonly_memmap_input",
    "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
    "check_estimators_dtypes",
    "check_complex_data",
    "check_dtype_object",
    "check_estimators_empty_data_messages",
    "check_pipeline_consistency",
    "check_estimators_nan_inf",
    "check_estimators_pickle",
    "check_f_contiguous_array_estimator",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_fit2d_1sample",
    "check_fit2d_1feature",
    "check_dict_unchanged",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
    "check_n_features_in",
    "check_fit1d",
    "check_fit2d_predict1d",
]
TRANSFORMER_CHECKS = [
    "check_transformer_data_not_an_array",
    "check_transformer_general",
    "check_transformer_preserve_dtypes",
]
KINDS = {
    "TextEmbedder": "texts (str or token lists)",
    "TokenEmbedder": "tokenized sentences (list of list of str)",
    "SequenceTagger": "tokenized sentences with tag lists as y",
    "TextPairEmbedder": "(first, second) pairs of texts",
}


def expected_failures(estimator) -> dict[str, str]:
    name = type(estimator).__name__
    reason = NUMERIC_X.format(name=name, kind=KINDS[name])
    checks = NUMERIC_CHECKS + (TRANSFORMER_CHECKS if hasattr(estimator, "transform") else [])
    return {check: reason for check in checks}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_sklearn_compatible(estimator, check):
    check(estimator)
