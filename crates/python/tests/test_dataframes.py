"""pandas and pyarrow on pvfs:// URLs through the fsspec entry point, no mount."""

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import fsspec


def frame(n, seed):
    return pd.DataFrame(
        {
            "i": range(seed, seed + n),
            "x": [float(i) / 7 for i in range(n)],
            "s": [f"row-{seed}-{i}" for i in range(n)],
        }
    )


def test_pandas_parquet_round_trip(tmp_pvfs):
    df = frame(100_000, 0)
    url = f"pvfs://{tmp_pvfs}/x.parquet"
    df.to_parquet(url)
    back = pd.read_parquet(url)
    pd.testing.assert_frame_equal(back, df)
    fs = fsspec.filesystem("pvfs")
    # pvfs:/path names the same file to the file system (pandas and fsspec.open
    # know URLs by their "://").
    assert fs.info(f"pvfs:{tmp_pvfs}/x.parquet")["size"] == fs.info(url)["size"]
    assert fs.size(url) > 0
    assert fs.ls(tmp_pvfs, detail=False) == [f"{tmp_pvfs}/x.parquet"]


def test_pandas_csv_round_trip(tmp_pvfs):
    df = frame(1000, 5)
    url = f"pvfs://{tmp_pvfs}/x.csv"
    df.to_csv(url, index=False)
    pd.testing.assert_frame_equal(pd.read_csv(url), df)


def test_pyarrow_dataset_over_a_directory(tmp_pvfs):
    fs = fsspec.filesystem("pvfs")
    parts = [frame(10_000, k * 10_000) for k in range(4)]
    for k, part in enumerate(parts):
        part.to_parquet(f"pvfs://{tmp_pvfs}/ds/part-{k}.parquet")
    dataset = ds.dataset(f"{tmp_pvfs}/ds", filesystem=fs, format="parquet")
    assert len(dataset.files) == 4
    table = dataset.to_table()
    assert table.num_rows == 40_000
    whole = pd.concat(parts, ignore_index=True)
    got = table.to_pandas().sort_values("i", ignore_index=True)
    pd.testing.assert_frame_equal(got, whole)
    # A filter pushed down, and the row count it leaves.
    some = dataset.to_table(filter=ds.field("i") < 15_000)
    assert some.num_rows == 15_000


def test_pyarrow_parquet_writes_through_the_file_system(tmp_pvfs):
    fs = fsspec.filesystem("pvfs")
    table = pa.table({"a": list(range(5000)), "b": [str(i) for i in range(5000)]})
    pq.write_table(table, f"{tmp_pvfs}/t.parquet", filesystem=fs)
    assert pq.read_table(f"{tmp_pvfs}/t.parquet", filesystem=fs).equals(table)
