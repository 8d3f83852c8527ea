// ttwork: the workload driver as a plain executable (libtt_metal.so mapped at start).
extern "C" int ttwork_main(int argc, char** argv);

int main(int argc, char** argv) { return ttwork_main(argc, argv); }
