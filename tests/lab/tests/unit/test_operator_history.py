"""The DBInstance operator's history is never behind what its writes made visible.

The API server shows a written status to every reader before the reply reaches the operator; a test
that saw an instance repaved and then counted its repaves must find the completion already noted.
"""

from __future__ import annotations

import threading
import time

from tests.lab.controllers.dbinstance import DBInstanceOperator

OBJ = {"metadata": {"namespace": "ns", "name": "db"}}


def test_a_history_read_during_a_write_waits_for_its_notes():
    operator = object.__new__(DBInstanceOperator)  # only the history: no lab, no API server
    operator.history, operator._history_lock = [], threading.Lock()
    counted = []

    def write(rt, obj, change, **kwargs):
        # The written status is visible now: a reader that saw it counts the repaves meanwhile.
        reader = threading.Thread(target=lambda: counted.append(operator.repaves("ns", "db")))
        reader.start()
        time.sleep(0.2)
        write.reader = reader

    operator._write = write
    operator._write_noted(None, OBJ, lambda s: None, [("RepaveCompleted", None)])
    write.reader.join(5)
    assert counted == [1]
