# Optional third-party libraries (BLAS, MPI, CUDA). Later folders add their find_package calls here
# and set HERD_EXTERNAL_<folder> / HERD_HAVE_<thing>.
