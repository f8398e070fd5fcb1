"""Decision models: the `ChoiceModel` protocol and the embedded model behind it.

The request and answer shapes follow the System One wire format (TypeSafe's Jev and the
servers compatible with it): a `state` plus named questions of type `choice`, `noul` or
`score`, each answered with a probability per option. See `memsift.classifiers.base`.
"""

from .base import Answer, ChoiceModel, Question, Request, UnsupportedQuestion, load_question

__all__ = ["Answer", "ChoiceModel", "Question", "Request", "UnsupportedQuestion", "load_question"]
