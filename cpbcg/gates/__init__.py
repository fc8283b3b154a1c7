"""CI checks of an evaluation: gates (`gates.py`), the evaluation summary model (`summary.py`)
and the reports CI systems read (`reports.py`: JUnit, JSON, GitHub annotations, markdown)."""
