"""Tasks: data sets → :class:`~confide.core.records.Item` lists, prompt formats and default graders.

``load_task(name_or_path)`` returns a :class:`Task`. A registered name
(:data:`TASKS`: ``triviaqa``, ...) loads a built-in task from its bundled
sample (``data_path=`` reads the full file); an existing ``.jsonl`` /
``.csv`` / ``.parquet`` file loads the user's data with a field mapping (see
:mod:`confide.tasks.files`); ``hf:<name>`` loads a Hugging Face dataset.
"""

from confide.tasks.base import TASKS, Task, TaskSpec, task
from confide.tasks.loading import LONG_FORM_TOKENS, describe_tasks, load_task
from confide.tasks.prompts import FORMATS

__all__ = ["FORMATS", "LONG_FORM_TOKENS", "TASKS", "Task", "TaskSpec", "describe_tasks",
           "load_task", "task"]
