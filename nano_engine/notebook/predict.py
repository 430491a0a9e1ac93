"""predict.py - the other half of "predict, then run", for every chapter.

:func:`predict` asks a question the reader answers in a text box before an experiment; its
``reveal(answer)`` shows the measured answer beside the guess afterwards. In a live notebook the
answer stays folded until the reader types a guess or clicks "Show answer", so "Run All" does not
give it away; headless, it just states the answer.
"""

from __future__ import annotations

import html
from typing import Any

from nano_engine.notebook import static_html


class Prediction:
    """A question for the reader to answer before running an experiment.

    Display it (it is the last expression of a cell, or ``display(p)``): a text box under the
    question. After the experiment, ``p.reveal(answer)`` returns a :class:`Revealed`, the
    comparison of guess and answer as text; display it (last expression, or ``display(...)``;
    never ``print``, which would show the answer at once).

    How much shows depends on who is looking, so that "Run All" does not give the answer away:

    * a live notebook (widgets render): the answer stays folded under "Show answer" until the
      reader types a prediction (Enter) or clicks "Show answer"; a guess typed before the
      experiment ran is compared at once;
    * a headless run (nbclient, ``nbconvert --execute``) or a page rendered without widgets: the
      output's text is the whole comparison, answer included; a page rendered with the saved
      widget state shows the folded answer, which a click opens (no kernel needed).

    >>> p = Prediction("How many tokens will hit?")
    >>> p.reveal(480)
    'How many tokens will hit? Answer: 480 (no prediction typed).'
    >>> p = Prediction("How many tokens will hit?", guess="300")
    >>> p.reveal(480)
    'How many tokens will hit? You predicted 300; answer: 480 (off by 180).'
    """

    WAITING = "<i>run the experiment below to see the answer</i>"

    def __init__(self, question: str, answer: Any = None, guess: str = "") -> None:
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question must be a non-empty string, got {question!r}")
        self.question, self.answer = question, answer
        self._guess = guess
        self._widget: Any = None
        self._revealed: Any = None  # the answer once reveal() ran (None before)
        self._result = ""

    @property
    def guess(self) -> str:
        """What the reader typed (stripped); "" when nothing was typed."""
        return (self._input.value if self._widget is not None else self._guess).strip()

    def reveal(self, answer: Any = None) -> Revealed:
        """Compare the guess with ``answer`` (default: the one given to the constructor)."""
        answer = self.answer if answer is None else answer
        if answer is None:
            raise ValueError("answer is missing: pass reveal(answer) or Prediction(..., answer=...)")
        self._revealed = answer
        self._sync()
        return Revealed(f"{self.question} {self._result}", self)

    def _compare(self) -> str:
        shown = _format_answer(self._revealed)
        if not self.guess:
            return f"Answer: {shown} (no prediction typed)."
        return f"You predicted {self.guess}; answer: {shown}{_miss(self.guess, self._revealed)}."

    def _sync(self, *_: Any) -> None:
        """Bring the result (and the widget, if shown) up to date with the guess and the answer."""
        if self._revealed is None:
            return
        self._result = self._compare()
        if self._widget is None:
            return
        if self.guess:  # the reader has committed to a prediction: compare openly
            self._output.value = f"<b>{html.escape(self._result)}</b>"
            self._input.disabled = True
        else:  # Run All, nobody typed: fold the answer away, a click (or a typed guess) opens it
            self._output.value = (f"<details class='nano-predict-fold'><summary>Show answer</summary>"
                                  f"<b>{html.escape(self._result)}</b> "
                                  f"<i>(or type your prediction and press Enter)</i></details>")

    @property
    def widget(self) -> Any:
        if self._widget is None:
            import ipywidgets as w

            self._input = w.Text(value=self._guess, placeholder="your prediction", continuous_update=False,
                                 layout=w.Layout(width="180px"))
            self._input.add_class("nano-predict-input")
            self._output = w.HTML(value=self.WAITING)
            self._output.add_class("nano-predict-answer")
            label = w.HTML(value=f"<b>Predict:</b> {html.escape(self.question)}")
            self._widget = w.VBox([label, w.HBox([self._input, self._output])])
            self._widget.add_class("nano-predict")
            self._input.observe(self._sync, names="value")  # a guess typed after the run opens the answer
            self._sync()
        return self._widget

    def to_html(self) -> str:
        """The question with a plain text box, for pages with no kernel (the answer is printed after the experiment)."""
        return ('<div class="nano-predict nano-predict-static" style="font-family: sans-serif; margin: 0.5em 0">'
                f'<b>Predict:</b> {html.escape(self.question)}<br>'
                '<input type="text" placeholder="your prediction" aria-label="your prediction" style="width: 180px"> '
                '<i class="nano-predict-answer">then read the answer under the experiment below</i></div>')

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
        if static_html():
            return {"text/html": self.to_html(), "text/plain": f"Predict: {self.question}"}
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        bundle["text/plain"] = f"Predict: {self.question} (type your answer in the box)"  # where widgets do not render
        return bundle


class Revealed(str):
    """The text ``Prediction.reveal`` returns: the whole comparison, answer included.

    Displayed in a notebook, a frontend that renders widgets shows the prediction's answer line
    (folded while no guess was typed); one that does not (a headless run's saved output, a static
    page) shows this text.
    """

    prediction: Prediction

    def __new__(cls, text: str, prediction: Prediction) -> Revealed:
        self = super().__new__(cls, text)
        self.prediction = prediction
        return self

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
        p = self.prediction
        p.widget  # noqa: B018 - builds the answer line if the question was never displayed
        bundle = p._output._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        bundle["text/plain"] = str(self)
        return bundle


def predict(question: str, answer: Any = None) -> Prediction:
    """Ask the reader ``question`` before an experiment; call ``.reveal(answer)`` after it."""
    return Prediction(question, answer)


def _format_answer(answer: Any) -> str:
    if isinstance(answer, float):
        return f"{answer:.3g}"
    return str(answer)


def _miss(guess: str, answer: Any) -> str:
    """How far a numeric guess was from a numeric answer ("" when either is not a number)."""
    try:
        guessed = float(guess.rstrip("%x ").replace(",", ""))
    except ValueError:
        return ""
    if not isinstance(answer, int | float) or isinstance(answer, bool):
        return ""
    if guessed == answer:
        return ": exactly right"
    off = abs(guessed - answer)
    return f" (off by {off:.3g})" if isinstance(answer, float) or off != int(off) else f" (off by {int(off)})"
