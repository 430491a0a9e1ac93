"""What only the chapters use: diagrams of the caches, steppers that drive them one operation at a
time, and the exercise buttons. The engine never imports these (they need graphviz, ipywidgets
and the ``practice/`` folder, which a server has no use for).
"""
