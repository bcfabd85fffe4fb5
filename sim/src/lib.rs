//! ConnectX-3 model and InfiniBand fabric (filled by the model issue).
