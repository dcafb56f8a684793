pub mod independent;
