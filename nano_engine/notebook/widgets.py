"""widgets.py: deprecated; importing it warns (``DeprecationWarning``), and it goes in the next
release. Its three chapters' steppers and the prediction widget now live in a module each:

==========================================  ====================================================
old (``nano_engine.notebook.widgets``)      new
==========================================  ====================================================
``Step``, ``StepperState``, ``Request``,    ``nano_engine.notebook.stepper`` (the stepper base)
``encode_requests``
``BlockPoolStepper``                        ``nano_engine.notebook.pool_stepper`` (chapter 02)
``RadixStepper``                            ``nano_engine.notebook.radix_stepper`` (chapter 03)
``TierStepper``                             ``nano_engine.notebook.tier_stepper`` (chapter 06)
``Prediction``, ``Revealed``, ``predict``   ``nano_engine.notebook.predict``
``static_html``                             ``nano_engine.notebook``
==========================================  ====================================================
"""

import warnings

from nano_engine.notebook import static_html
from nano_engine.notebook.pool_stepper import BlockPoolStepper
from nano_engine.notebook.predict import Prediction, Revealed, predict
from nano_engine.notebook.radix_stepper import RadixStepper
from nano_engine.notebook.stepper import Request, Step, StepperState, encode_requests
from nano_engine.notebook.tier_stepper import TierStepper

__all__ = ["BlockPoolStepper", "Prediction", "RadixStepper", "Request", "Revealed", "Step", "StepperState",
           "TierStepper", "encode_requests", "predict", "static_html"]

warnings.warn("nano_engine.notebook.widgets is deprecated and goes in the next release; import from "
              "nano_engine.notebook.pool_stepper (BlockPoolStepper), .radix_stepper (RadixStepper), "
              ".tier_stepper (TierStepper), .predict (predict, Prediction, Revealed) or .stepper (Step, "
              "StepperState)", DeprecationWarning, stacklevel=2)
