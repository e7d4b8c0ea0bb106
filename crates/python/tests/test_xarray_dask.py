"""xarray and dask on pvfs:// URLs through the fsspec entry point, no mount."""

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import xarray as xr


def test_xarray_open_dataset_of_a_netcdf_file(tmp_pvfs):
    fs = fsspec.filesystem("pvfs")
    a = xr.Dataset(
        {"t": (("x", "y"), np.arange(20_000.0).reshape(100, 200))},
        coords={"x": np.arange(100), "y": np.arange(200) * 0.5},
        attrs={"title": "on pvfs"},
    )
    url = f"pvfs://{tmp_pvfs}/t.nc"
    with fs.open(url, "wb") as f:
        f.write(a.to_netcdf(engine="h5netcdf"))
    with xr.open_dataset(url, engine="h5netcdf") as b:
        xr.testing.assert_identical(b.load(), a)


def test_dask_dataframe_parquet_round_trip(tmp_pvfs):
    df = pd.DataFrame({"i": range(10_000), "x": np.arange(10_000.0) / 3})
    url = f"pvfs://{tmp_pvfs}/parts"
    dd.from_pandas(df, npartitions=4).to_parquet(url)
    fs = fsspec.filesystem("pvfs")
    assert len(fs.glob(f"{tmp_pvfs}/parts/*.parquet")) == 4
    back = dd.read_parquet(url).compute().sort_values("i", ignore_index=True)
    pd.testing.assert_frame_equal(back, df)
