"""The checks of what the scikit-learn estimators receive: each rule in one place.

Every public method of an estimator (``fit``, ``transform``, ``predict``, ``score``, ``fit_mix``,
...) passes its ``X`` and ``y`` through one function here before anything else, and the code after
it trusts what that returned:

========================================  ========================================================
what is received                          the check
========================================  ========================================================
tokenized sentences (``X``)               :func:`check_token_lists`, a :class:`TokenLists`
texts (``X`` of TextEmbedder)             :func:`check_texts`
pairs (``X`` of TextPairEmbedder)         :func:`check_pairs`
tag lists aligned with ``X`` (taggers)    :func:`check_tagged` (fit, score, report)
token labels (``y`` of TokenEmbedder)     :func:`token_labels`
class labels (``y`` of texts and pairs)   :func:`class_labels` (to learn a mix), else :func:`check_targets`
per-token class codes (``fit_mix``)       :func:`check_codes`
document ids (``doc_ids``, per sentence)  :func:`check_doc_ids`, a :class:`DocIds`
========================================  ========================================================

Checked token lists are a :class:`TokenLists`. An estimator that hands them on (a tagger fitting
and transforming with its :class:`TokenEmbedder`) passes that object, and the other estimator's
entry point takes it as it is: however many estimators ``X`` goes through, it is checked once.

The rules for containers: ``None`` and other non-iterables, a single string, a sparse matrix, a
numeric array and a DataFrame of the wrong width are a ``TypeError`` naming ``X`` (or ``y``), what
was received and the fix; a one-column DataFrame stands for its column's cells.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np

from .._inputs.documents import checked_doc_ids, is_missing
from .._inputs.sentences import check_sentences
from ..tokenizers import get_tokenizer, tokenize_item, tokenize_items

#: what the token-level estimators take as ``X``
TOKENS_EXPECTED = "a list of tokenized sentences (list of list of str), e.g. [['EU', 'rejects', 'German', 'call']]"
#: what TextEmbedder takes as ``X``
TEXTS_EXPECTED = "an iterable of texts (str) or of token lists, e.g. ['EU rejects German call', 'Peter Blackburn']"
#: what TextPairEmbedder takes as ``X``
PAIRS_EXPECTED = "a sequence of (first, second) pairs of texts or token lists, or a two-column array or DataFrame"
#: what the taggers take as ``y``
TAGS_EXPECTED = "one tag list per sentence of X (list of list of str), e.g. [['B-ORG', 'O', 'B-MISC', 'O']]"

Tokenizer = Union[str, Callable[[str], list]]


# -- tokenized sentences ------------------------------------------------------------------------


class TokenLists(list):
    """Tokenized sentences that passed :func:`check_token_lists`: a list of lists of str.

    Only this module makes one from unchecked input; :func:`check_token_lists` returns it as it is.
    """

    __slots__ = ()

    def subset(self, rows) -> "TokenLists":
        """The sentences at ``rows`` (checked already, so still a :class:`TokenLists`)."""
        return TokenLists(self[i] for i in rows)


def check_token_lists(X, *, fit: bool = False) -> TokenLists:
    """``X`` as checked tokenized sentences.

    A pandas DataFrame is taken when it has one column (its cells are the token lists), like a
    one-column DataFrame of texts in :class:`TextEmbedder`.

    Parameters
    ----------
    fit : bool
        Refuse an empty ``X`` (a ``ValueError``): there is nothing to fit on.

    Raises
    ------
    TypeError
        ``None`` and other non-iterables, numeric arrays and other DataFrames (naming ``X``); a
        sentence that is not a list of str (naming the sentence and word).
    ValueError
        A word UTF-8 cannot encode (naming the sentence, word and character); an empty ``X`` to fit.
    """
    sentences = X if isinstance(X, TokenLists) else TokenLists(_sentences(X))
    if fit:
        check_nonempty(sentences, "sentence")
    return sentences


def _sentences(X) -> list:
    reject_sparse(X)
    X = check_iterable(one_column(X, "X", "token lists"), "X", TOKENS_EXPECTED)
    if isinstance(X, np.ndarray) and X.dtype != object:
        kind = "an array of str" if X.dtype.kind in "US" else "a numeric array"
        raise TypeError(
            f"expected a list of tokenized sentences (list of list of str), got {kind} of "
            f"shape {X.shape} and dtype {X.dtype}; pass e.g. [['EU', 'rejects', 'German', 'call']]"
            + (" (X.tolist() for a 2-D array of tokens)" if X.dtype.kind in "US" and X.ndim == 2 else "")
        )
    return check_sentences(X)


def check_nonempty(items: list, unit: str, method: str = "fit") -> list:
    """``items`` if there is at least one; a ``ValueError`` naming ``method`` (``fit``, ``score``) otherwise."""
    if not items:
        raise ValueError(f"{method} needs at least one {unit}; X is empty")
    return items


# -- texts and pairs ----------------------------------------------------------------------------


def check_texts(X, tokenizer: Tokenizer, *, fit: bool = False) -> list[list[str]]:
    """Texts as token lists: raw strings are split by ``tokenizer``, token lists are checked and kept.

    ``X`` is an iterable (a list, a Series) of texts, or a one-column 2-D array or DataFrame of them;
    an error names the text (``"text 3"``) and token.
    """
    split = get_tokenizer(tokenizer)
    texts = tokenize_items(_text_column(X), split, "text")
    return check_nonempty(texts, "text") if fit else texts


def _text_column(X) -> list:
    """Accept a list/Series of texts, or a one-column 2-D array/DataFrame of texts."""
    reject_sparse(X)
    if isinstance(X, str):
        raise TypeError("expected an iterable of texts, got a single string; pass [text]")
    X = check_iterable(one_column(X, "X", "texts"), "X", TEXTS_EXPECTED)
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        if X.ndim != 1 or (X.size and not all(isinstance(x, (str, list, tuple)) for x in X.ravel())):
            raise TypeError(
                f"expected texts (an iterable of str, or a one-column array of str), got an array of "
                f"shape {X.shape} and dtype {X.dtype}"
            )
    return list(X)


def check_pairs(X, tokenizer: Tokenizer, *, fit: bool = False) -> list[tuple[list[str], list[str]]]:
    """Pairs of token lists: raw strings are split by ``tokenizer``; every pair is checked.

    ``X`` is a sequence of ``(first, second)`` pairs of texts or token lists, or a two-column 2-D
    array or DataFrame of texts; an error names the pair and side (``"pair 3, side 1"``).
    """
    split = get_tokenizer(tokenizer)
    pairs = []
    for i, pair in enumerate(_pair_rows(X)):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, (list, tuple, np.ndarray)) or len(pair) != 2:
            raise TypeError(f"pair {i} is {type(pair).__name__} ({str(pair)[:40]!r}); expected a "
                            "(first, second) pair of texts or token lists")
        pairs.append(tuple(tokenize_item(side, split, f"pair {i}, side {k}") for k, side in enumerate(pair)))
    return check_nonempty(pairs, "pair") if fit else pairs


def _pair_rows(X) -> list:
    """Accept a sequence of pairs, or a two-column 2-D array or DataFrame of texts."""
    reject_sparse(X)
    if isinstance(X, (str, bytes)):
        raise TypeError("expected a sequence of (first, second) pairs, got a single string")
    if is_dataframe(X):
        if X.shape[1] != 2:
            columns = ", ".join(map(repr, list(X.columns)[:5]))
            raise TypeError(f"X is a DataFrame with {X.shape[1]} columns ({columns or 'none'}); expected two columns "
                            "of texts (first, second): pass them, e.g. X=df[['premise', 'hypothesis']]")
        X = X.to_numpy()
    X = check_iterable(X, "X", PAIRS_EXPECTED)
    if isinstance(X, np.ndarray):
        if X.ndim != 2 or X.shape[1] != 2:
            raise TypeError(f"expected pairs (a two-column array of texts), got an array of shape {X.shape}")
        return [tuple(row) for row in X]
    return list(X)


# -- tags of token lists ------------------------------------------------------------------------


def check_tagged(X, y, estimator: str, *, fit: bool = True) -> tuple[TokenLists, list, np.ndarray]:
    """A tagger's training data (or, ``fit=False``, the gold tags it is scored against), checked:
    ``(sentences, tag lists, flat tags)``.

    Every sentence needs one str tag per token (a ``ValueError`` or ``TypeError`` naming the sentence
    and token otherwise), and ``y=None`` is a ``ValueError`` (``estimator`` names the tagger in that
    message). Empty sentences are allowed (they contribute no rows); to ``fit``, an empty ``X`` or
    one without any token is a ``ValueError``.
    """
    if y is None:
        raise ValueError(f"{estimator} requires y to be passed, but the target y is None; pass one tag list per "
                         "sentence")
    sentences = check_token_lists(X, fit=fit)
    y = check_tag_lists(y)
    if len(y) != len(sentences):
        raise ValueError(f"X has {len(sentences)} sentences but y has {len(y)} tag lists")
    for i, item in enumerate(y):
        if not _is_label_list(item):  # one flat tag per token is TokenEmbedder's y, not a tagger's
            raise TypeError(f"y[{i}] is {type(item).__name__} ({str(item)[:40]!r}); expected {TAGS_EXPECTED}")
    tags = token_labels(sentences, y, strings=True)
    if fit and not len(tags):
        raise ValueError(f"the training data holds no tokens: all {len(sentences)} sentences of X are empty; a "
                         "tagger learns from tagged tokens, so pass sentences with tokens")
    return sentences, y, tags


def check_tag_lists(y) -> list:
    """``y`` as a list of tag lists (a one-column DataFrame as its cells); ``TypeError`` naming ``y`` otherwise."""
    if isinstance(y, (str, bytes)):
        raise TypeError("y must be a list of tag lists (one per sentence), got a single string")
    return list(check_iterable(one_column(y, "y", "tag lists"), "y", TAGS_EXPECTED))


def token_labels(sentences: Sequence[Sequence[str]], y, *, strings: bool = False) -> np.ndarray:
    """Flatten per-sentence labels to one label per token, checking every length and label.

    ``y`` is a list of label lists (one per sentence) or a flat array of one label per token.

    Parameters
    ----------
    strings : bool
        Require every label to be a ``str`` (tags such as ``"B-PER"``); otherwise ``str`` or
        integer labels are accepted (never mixed).

    Raises
    ------
    ValueError
        If ``len(y)`` matches neither the number of sentences nor of tokens, or a sentence's label
        list length differs from its token count (the message names the sentence).
    TypeError
        If a label is ``None``, a float (``NaN``), a bool or another non-label value (the message
        names the sentence and token, or the flat index); nothing is turned into text silently.
    """
    n_tokens = sum(len(s) for s in sentences)
    if isinstance(y, (str, bytes)):
        raise TypeError("y must be a list of tag lists (one per sentence), got a single string")
    y = list(y)
    if len(y) == len(sentences) and all(_is_label_list(item) for item in y):
        for i, (sentence, tags) in enumerate(zip(sentences, y)):
            if len(tags) != len(sentence):
                raise ValueError(
                    f"sentence {i} has {len(sentence)} tokens but {len(tags)} tags; every token needs "
                    "exactly one tag"
                )
            for j, tag in enumerate(tags):
                _check_label(tag, f"sentence {i}, token {j}", strings)
        flat = [tag for tags in y for tag in tags]
    elif len(y) == n_tokens and not any(_is_label_list(item) for item in y):
        for k, tag in enumerate(y):
            _check_label(tag, f"label {k}", strings)
        flat = y
    else:
        raise ValueError(
            f"y has {len(y)} entries but X has {len(sentences)} sentences ({n_tokens} tokens); pass one "
            "tag list per sentence"
        )
    kinds = {isinstance(tag, str) for tag in flat}
    if len(kinds) > 1:
        raise TypeError("y mixes str and integer labels; use one kind")
    return np.asarray(flat)


def _check_label(tag, where: str, strings: bool) -> None:
    if isinstance(tag, str):
        return
    if not strings and isinstance(tag, (int, np.integer)) and not isinstance(tag, (bool, np.bool_)):
        return
    expected = "a str tag" if strings else "a str or int label"
    raise TypeError(f"{where}: the label is {type(tag).__name__} ({tag!r}); expected {expected}")


def _is_label_list(item) -> bool:
    return isinstance(item, (list, tuple, np.ndarray)) and not isinstance(item, str)


def check_codes(codes, n_tokens: int) -> np.ndarray:
    """``(n_tokens,)`` class indices, one per token (what a tagger gives ``fit_mix``)."""
    codes = np.asarray(codes)
    if codes.shape != (n_tokens,):
        raise ValueError(f"codes must hold one class per token: {n_tokens} tokens, got shape {codes.shape}")
    return codes


# -- class labels of texts and pairs ------------------------------------------------------------


def class_labels(y, n_items: int, unit: str = "text") -> np.ndarray:
    """Check class labels: ``(n_items,)``, all str, all numbers or all bools (``unit``: what each
    label belongs to, ``"text"`` or ``"pair"``).

    Raises
    ------
    ValueError
        ``y`` has another length or shape, or a label is missing (``None``, NaN, NaT, ``pd.NA``),
        infinite or continuous; the message names its index and value.
    TypeError
        A label is not a str, number or bool, or ``y`` mixes them; the message names the index and
        value (nothing is turned into text silently).
    """
    labels = check_targets(y, n_items, unit, outputs=False)
    if labels.dtype.kind == "f" and not np.all(np.mod(labels, 1) == 0):
        raise ValueError(
            "combine='scalar_mix' learns its weights from class labels, but y is continuous; use "
            "combine='mean' (or another fixed combine) for regression targets"
        )
    return labels


def check_targets(y, n_items: int, unit: str = "text", *, outputs: bool = True) -> np.ndarray:
    """Check ``y`` of texts or pairs: one row per item, every value a finite number, a str or a bool,
    all of one kind. An estimator whose layers are combined with fixed weights does not learn from
    ``y`` but checks it all the same (a pipeline's regressor or classifier will learn from it);
    :func:`class_labels` adds what learning a mix needs.

    Parameters
    ----------
    outputs : bool
        Accept ``(n_items, n_outputs)`` targets too (a multi-output model's); else ``(n_items,)`` only.

    Raises
    ------
    ValueError
        ``y`` has another length or shape, or a value is missing (``None``, NaN, NaT, ``pd.NA``)
        or infinite; the message names its index and value.
    TypeError
        A value is not a str, number or bool, or ``y`` mixes them; the message names the index and
        value (nothing is turned into text silently).
    """
    if isinstance(y, (str, bytes)):
        raise TypeError(f"y must hold one class label per {unit}, got a single string")
    values = np.asarray(y, dtype=object)  # the labels as given: [1, "a"] is not turned into ["1", "a"]
    if values.ndim not in ((1, 2) if outputs else (1,)) or len(values) != n_items:
        raise ValueError(f"y must hold one class label per {unit}: {n_items} {unit}s, got y of shape {values.shape}")
    first = None
    for index in np.ndindex(values.shape):
        label, where = values[index], f"y[{', '.join(map(str, index))}]"
        kind = _label_kind(label, where, unit)
        if first is None:
            first = (kind, where, label)
        elif kind != first[0]:
            raise TypeError(
                f"y mixes kinds of class labels: {first[1]} is {type(first[2]).__name__} ({first[2]!r}) but {where} "
                f"is {type(label).__name__} ({label!r}); use one kind (all str, all int or all bool)"
            )
    return np.asarray(values.tolist())


def _label_kind(label, where: str, unit: str) -> str:
    """``"str"``, ``"number"`` or ``"bool"``; an error naming ``where`` (``"y[3]"``) for anything else."""
    if is_missing(label):
        raise ValueError(f"{where} is {label!r}, a missing class label; give every {unit} a label (drop the {unit}s "
                         "without one, or give them a class of their own)")
    if isinstance(label, str):
        return "str"
    if isinstance(label, (bool, np.bool_)):
        return "bool"
    if isinstance(label, numbers.Real):
        if not math.isfinite(label):
            raise ValueError(f"{where} is {label!r}; class labels are finite")
        return "number"
    raise TypeError(f"{where} is {type(label).__name__} ({str(label)[:40]!r}); expected a class label (str, int or bool)")


# -- document ids -------------------------------------------------------------------------------


class DocIds(list):
    """Document ids that passed :func:`check_doc_ids`: one per sentence, each document's consecutive.

    Like :class:`TokenLists`, an estimator hands them on as they are (a tagger to its embedders), and
    :func:`check_doc_ids` returns them without checking them again.
    """

    __slots__ = ()

    def subset(self, rows) -> "DocIds":
        """The ids at ``rows`` (in order: the documents stay consecutive)."""
        return DocIds(self[i] for i in rows)


def check_doc_ids(doc_ids, n_sentences: int) -> Optional[DocIds]:
    """One document id per sentence (like scikit-learn's ``groups``), or ``None`` when not given.

    Any hashable value but a bool names a document (a str, an int, a tuple); the sentences of one document must
    be consecutive in ``X``, in their order in the document (context is taken from the sentences
    before and after). ``None`` (not given): ``X``'s order is one document.

    Raises
    ------
    TypeError
        ``doc_ids`` is a single string or not iterable, or an id is a bool or unhashable (a list,
        a dict); the message names its index.
    ValueError
        ``doc_ids`` does not hold one id per sentence, an id is missing (``None``, NaN), or a
        document is split apart (its id comes back after another document's); the message names the
        index.
    """
    if doc_ids is None:
        return None
    if isinstance(doc_ids, DocIds) and len(doc_ids) == n_sentences:
        return doc_ids
    if isinstance(doc_ids, (str, bytes)):
        raise TypeError("doc_ids must hold one document id per sentence of X, got a single string")
    ids = DocIds(check_iterable(one_column(doc_ids, "doc_ids", "document ids"), "doc_ids",
                                "one document id (e.g. a str or int) per sentence of X"))
    if len(ids) != n_sentences:
        raise ValueError(f"doc_ids has {len(ids)} ids but X has {n_sentences} sentences; pass one document id per "
                         "sentence (sentences of one document share it)")
    for _ in checked_doc_ids(ids, "X"):  # each id, and each document's sentences together
        pass
    return ids


# -- containers ---------------------------------------------------------------------------------


def check_iterable(X, name: str, expected: str):
    """``X`` itself if it can be iterated; otherwise a ``TypeError`` naming ``name`` and ``expected``."""
    if X is None or not hasattr(X, "__iter__"):
        received = "None" if X is None else f"{type(X).__name__} ({str(X)[:40]!r})"
        raise TypeError(f"{name} is {received}; expected {expected}")
    return X


def one_column(X, name: str, holding: str):
    """A pandas DataFrame with one column as that column's cells (a list); ``X`` itself if not a DataFrame.

    Iterating a DataFrame gives its column labels, never its cells, so any other DataFrame is a
    ``TypeError`` naming its columns and how to pass the one that holds ``holding``.
    """
    if not is_dataframe(X):
        return X
    columns = list(X.columns)
    if len(columns) == 1:
        return X.iloc[:, 0].tolist()
    shown = ", ".join(map(repr, columns[:5])) + (", ..." if len(columns) > 5 else "")
    example = repr(columns[0]) if columns else "'tokens'"
    raise TypeError(
        f"{name} is a DataFrame with {len(columns)} columns ({shown or 'none'}); expected one column of {holding}: "
        f"pass the column that holds them, e.g. {name}=df[{example}].tolist()"
    )


def is_dataframe(X) -> bool:
    """Whether ``X`` is a pandas DataFrame (without importing pandas)."""
    return hasattr(X, "iloc") and hasattr(X, "columns") and getattr(X, "ndim", None) == 2


def reject_sparse(X) -> None:
    """Sparse matrices are numeric features, never text: say so."""
    import scipy.sparse

    if scipy.sparse.issparse(X):
        raise TypeError(
            f"sparse input is not supported: got a {type(X).__name__}; contextembed estimators take "
            "texts or tokenized sentences (list of list of str)"
        )


__all__ = [
    "PAIRS_EXPECTED", "TAGS_EXPECTED", "TEXTS_EXPECTED", "TOKENS_EXPECTED", "DocIds", "TokenLists", "check_codes",
    "check_doc_ids", "check_iterable", "check_nonempty", "check_pairs", "check_tag_lists", "check_tagged",
    "check_targets", "check_texts", "check_token_lists", "class_labels", "is_dataframe", "one_column", "reject_sparse", "token_labels",
]
