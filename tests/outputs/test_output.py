"""requests.parquet keeps 'no error' as null, not as the string 'nan'."""

from pathlib import Path

import pandas as pd

from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from outputs.folder_writer import records_frame


def test_error_kind_is_null_for_successes_and_text_for_failures(tmp_path: Path) -> None:
    ok = RequestRecord(index=0, prefix_id=0, sent_ns=1, end_ns=2)
    failed = RequestRecord(index=1, prefix_id=1, sent_ns=1, error_kind=ErrorKind.TIMEOUT)
    frame = records_frame(2, 4, 1, [ok, failed])
    path = tmp_path / "requests.parquet"
    frame.to_parquet(path, index=False)
    back = pd.read_parquet(path)
    assert back["error_kind"].isna().tolist() == [True, False]
    assert back["error_kind"].tolist()[1] == "timeout"
    assert "nan" not in back["error_kind"].astype(str).tolist()[1:]
